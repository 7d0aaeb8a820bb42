# hetpool — the two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8080
# Two installs into one venv: `make demo` needs only the runtime; test, lint and the
# developer's venv add the test tools and the extras the tests exercise (plot, tracing).
RUNTIME_STAMP := $(VENV)/.installed-runtime
STAMP := $(VENV)/.installed
# Two pytest workers: tests that share the Slurm cluster and Ray head run on one of them (tests/conftest.py).
TEST_WORKERS ?= 2

.PHONY: demo demo-full test venv lint bench clean-demo i18n

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(RUNTIME_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,plot,tracing]'
	touch $@

venv: $(STAMP)

## Start the server with the demo inventory on SQLite (data in ~/.hetpool unless DATA_DIR=...).
demo: $(RUNTIME_STAMP)
	deploy/local-runas.sh
	$(BIN)/hetpool up --demo --port $(PORT) $(if $(DATA_DIR),--data-dir $(DATA_DIR))

## The demo with a real Slurm cluster and a Ray head beside the local backend (stops them on exit).
demo-full: $(RUNTIME_STAMP)
	deploy/local-runas.sh
	@trap 'trap - EXIT; deploy/ray.sh stop; deploy/slurm.sh stop' EXIT INT TERM; \
	  conf=$$(deploy/slurm.sh start) && ray=$$(deploy/ray.sh start) && \
	  $(BIN)/hetpool up --demo --port $(PORT) --slurm-conf $$conf --ray-address $$ray $(if $(DATA_DIR),--data-dir $(DATA_DIR))

## Install what the tests need (incl. Debian's chromium for the browser tests), start PostgreSQL, a Slurm cluster and a Ray head,
## run the suite on SQLite and PostgreSQL; screenshots of every dashboard page land in artifacts/dashboard/.
test: $(STAMP)
	$(BIN)/ruff check src tests
	deploy/local-runas.sh
	@browser=$$(deploy/chromium.sh) && url=$$(deploy/postgres.sh start) && slurm_conf=$$(deploy/slurm.sh start) && ray_url=$$(deploy/ray.sh start) && \
	  HETPOOL_TEST_CHROMIUM=$$browser HETPOOL_TEST_POSTGRES_URL=$$url HETPOOL_TEST_SLURM_CONF=$$slurm_conf HETPOOL_TEST_RAY_ADDRESS=$$ray_url \
	  $(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup; rc=$$?; \
	  deploy/ray.sh stop; deploy/slurm.sh stop; deploy/postgres.sh stop; exit $$rc

## Dashboard translations: extract the texts of templates and Python code (src/hetpool/web/babel.cfg), merge them
## into the zh-CN catalog (new texts arrive untranslated, removed ones are dropped), compile it. docs/dashboard.md.
i18n: $(STAMP)
	@pot=$$(mktemp --suffix=.pot) && trap 'rm -f $$pot' EXIT && cd src/hetpool/web && \
	  $(abspath $(BIN))/pybabel -q extract -F babel.cfg -k C_:1c,2 --add-location=file --sort-by-file --no-wrap --project=hetpool \
	    --copyright-holder="the hetpool authors" -o $$pot . && \
	  $(abspath $(BIN))/pybabel -q update -i $$pot -d locale -D messages --ignore-obsolete --no-fuzzy-matching --no-wrap && \
	  $(abspath $(BIN))/pybabel compile -d locale -D messages --statistics

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

bench: $(STAMP)
	$(BIN)/python bench/cycle_bench.py
