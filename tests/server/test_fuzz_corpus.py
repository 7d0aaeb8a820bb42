"""A deterministic corpus of hostile values sent to every endpoint of the OpenAPI document,
on SQLite and PostgreSQL (issue 14, finding 7): no answer is a 5xx, and every 4xx is JSON
with a `code` and a non-empty `message`.

Where test_fuzz_api.py lets schemathesis generate a few values per endpoint, this sends
each value that broke hetpool before (or breaks servers like it) to each place it can
go: every path and query parameter and header of every operation, every field (nested
too) of every JSON body, every field of a document of each spec kind through `apply`,
and whole bodies that are not JSON at all. The values: lone surrogates, NUL bytes,
integers over 2^31, 2^63 and 10^20 and of more than 4,300 digits, negative numbers,
non-finite numbers (`Infinity`, `NaN`, `1e309` as raw JSON), oversized strings (10,000
characters, a 1 MB command), deep nesting.

One test per operation (and per spec kind) and database; each lists every value that got
a bad answer, so a failure says exactly what to fix.
"""

from __future__ import annotations

import copy
import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from hetpool.core.clock import FixedClock
from hetpool.engines.local import LocalBackend
from hetpool.server.app import create_app
from hetpool.server.db.session import Database
from hetpool.server.services import auth
from hetpool.server.services.context import ServiceContext
from hetpool.server.settings import Settings
from tests.conftest import DATABASES, database_url, demo_documents

# ------------------------------------------------------------------------ hostile values
# As text: for path segments, query values and headers (percent-encoded as UTF-8 with
# surrogates passed through, which is what a hostile client can put on the wire).
TEXT = [
    "\ud800",
    "a\udfff",
    "a\x00b",
    "x" * 10_000,
    "2147483648",  # 2^31: over PostgreSQL INTEGER
    "9223372036854775808",  # 2^63: over any 64-bit integer
    str(10**20),
    "9" * 4400,  # over Python's 4,300-digit limit for int()
    "-1",
    "-9223372036854775809",
    "1e309",
    "NaN",
    "Infinity",
    "-Infinity",
    "0",
    "",
    "../../etc/passwd",
    "%",
    "汉字",
]
HEADER_TEXT = [b"x" * 8000, b"\xe9", b"-1", b"9" * 4400, b"\xed\xa0\x80"]  # header bytes: latin-1, a surrogate's UTF-8
DEEP = b"[" * 3000 + b"]" * 3000
# As raw JSON tokens, for body fields (the JSON decoder reads NaN, Infinity and 1e309 as floats).
JSON = [
    b'"\\ud800"',
    b'"\\udfff\\ud800"',
    b'"a\\u0000b"',
    b'"\xed\xa0\x80"',  # a surrogate as raw UTF-8 bytes
    json.dumps("x" * 10_000).encode(),
    json.dumps("汉" * 5_000, ensure_ascii=False).encode(),
    b"2147483648",
    b"9223372036854775808",
    b"1" + b"0" * 20,
    b"9" * 4400,
    b"-1",
    b"-9223372036854775809",
    b"1e309",
    b"-1e309",
    b"Infinity",
    b"-Infinity",
    b"NaN",
    b"0.5",
    b"true",
    b"null",
    b"[]",
    b"{}",
    b'{"a": "b"}',
    DEEP,
]
ONE_MB = json.dumps("c" * 1_000_000).encode()  # every field of the API's own bodies, and a task's command
RAW_BODIES = [
    b"",
    b"{",
    b"[]",
    b"null",
    b"NaN",
    b'"\\ud800"',
    b"9" * 5000,
    b'{"a": ' * 3000 + b"1" + b"}" * 3000,
    DEEP,
    b"\xff\xfe{}",
    b'{"name": "\xed\xa0\x80"}',
]

# --------------------------------------------------------------- valid bodies to start from
TASK = {
    "name": "corpus-task",
    "tenant": "ai-lab/nlp/llm-sft",
    "type": "general",
    "description": "d",
    "labels": {"k": "v"},
    "framework": {"name": "none", "version": "", "extras": {}},
    "workers": 1,
    "per_worker": {"devices": {"class": "cpu", "count": 1}, "cpu": 1, "memory_gb": 1},
    "features": [],
    "image": "",
    "command": "echo hi",
    "env_vars": {"A": "1"},
    "priority": "normal",
    "data": {"zone": "gz", "path": "/data"},
    "runtime_estimate": "1h",
    "max_runtime": "2h",
    "preemptible": True,
}
NODE = {"name": "corpus-node", "cluster": "gz-general", "cpu_cores": 4, "memory_gb": 8}
BODIES: dict[tuple[str, str], Any] = {
    ("post", "/api/v1/apply"): {
        "documents": [{"kind": "Tenant", "name": "corpus-t", "description": "d", "labels": {"k": "v"}}],
        "sources": ["c.yaml"],
    },
    ("post", "/api/v1/tasks"): TASK,
    ("post", "/api/v1/tasks/plan"): TASK,
    ("post", "/api/v1/catalog/compat-check"): {"pool": "bj-a100-80g", "framework": {"name": "pytorch", "version": ">=2.3"}, "has_image": False},
    ("post", "/api/v1/agent/register"): {"node": NODE, "agent_version": "1", "models": []},
    ("post", "/api/v1/agent/heartbeat"): {
        "node": "corpus-node",
        "devices": [{"index": 0, "model": "cpu-x86-64", "health": "ok", "utilisation_pct": 1, "memory_used_mib": 1}],
        "agent_version": "1",
    },
    ("post", "/api/v1/users"): {"name": "corpus-new", "bindings": [{"role": "viewer", "tenant": "ai-lab"}]},
    ("put", "/api/v1/users/{name}/bindings"): {"bindings": [{"role": "viewer", "tenant": "ai-lab"}]},
    ("post", "/api/v1/users/{name}/bindings"): {"bindings": [{"role": "viewer", "tenant": "ai-lab"}]},
    ("post", "/api/v1/users/{name}/tokens"): {"label": "l", "expires_in": "1d"},
    ("post", "/api/v1/tokens"): {"label": "l", "expires_in": "1d"},
    ("put", "/api/v1/whoami/preferences"): {"language": "en"},
    ("post", "/api/v1/approvals/{approval_id}/approve"): {"comment": "c"},
    ("post", "/api/v1/approvals/{approval_id}/reject"): {"comment": "c"},
    ("post", "/api/v1/capacity/what-if"): {
        "days": 1,
        "add": [{"count": 1, "model": "nvidia-a100-80g"}],
        "quotas": {"ai-lab": 1},
        "wait_target_hours": 1,
        "idle_below": 0.3,
    },
}
# One valid document of each spec kind, applied once at start (so the corpus reaches past
# validation into the code behind it) and then sent with each field replaced.
SPEC_SAMPLES: dict[str, dict] = {
    "DeviceModel": {
        "kind": "DeviceModel",
        "name": "corpus-model",
        "vendor": "nvidia",
        "class": "gpu",
        "display_name": "Corpus",
        "memory_gb": 16,
        "fp16_tflops": 10,
        "cores": 10,
        "features": ["fp16"],
        "aliases": ["corpus"],
        "relative_performance": {"training": 0.5},
    },
    "Tenant": {"kind": "Tenant", "name": "corpus-org", "display_name": "Corpus", "weight": 1, "labels": {"k": "v"}},
    "Cluster": {
        "kind": "Cluster",
        "name": "corpus-cluster",
        "backend": "local",
        "zone": "gz",
        "region": "r",
        "backend_config": {"node_prefix": "c-"},
    },
    "Node": {
        "kind": "Node",
        "name": "corpus-node2",
        "cluster": "corpus-cluster",
        "cpu_cores": 8,
        "memory_gb": 16,
        "devices": [{"model": "corpus-model", "count": 2, "islands": [0, 0]}],
        "stack": {"driver": "535.0", "runtime": {"name": "cuda", "version": "12.2"}, "frameworks": {"pytorch": "2.4.1"}},
    },
    "Pool": {
        "kind": "Pool",
        "name": "corpus-pool",
        "cluster": "corpus-cluster",
        "model": "corpus-model",
        "nodes": ["corpus-node2"],
        "price_per_hour": 1,
    },
    "Quota": {"kind": "Quota", "name": "corpus-quota", "tenant": "corpus-org", "limits": [{"resource": "gpu", "nominal": 2, "borrowing_limit": 1}]},
    "ApprovalPolicy": {"kind": "ApprovalPolicy", "name": "corpus-approval", "tenant": "corpus-org", "max_devices": 64, "expire_after": "1h"},
    "PriceList": {
        "kind": "PriceList",
        "name": "corpus-prices",
        "devices": [{"model": "corpus-model", "per_device_hour": 1}],
        "per_cpu_core_hour": 0.1,
    },
    "Budget": {"kind": "Budget", "name": "corpus-budget", "tenant": "corpus-org", "amount": 100, "alert_at": [0.5], "hard_stop": False},
    "ReclaimPolicy": {"kind": "ReclaimPolicy", "name": "corpus-reclaim", "tenant": "corpus-org", "idle_for": "1h", "notice": "5m"},
    "TaskTemplate": {
        "kind": "TaskTemplate",
        "name": "corpus-template",
        "type": "general",
        "display_name": "Corpus",
        "defaults": {"command": "echo t", "env_vars": {"B": "2"}, "workers": 1, "runtime_estimate": "1h"},
    },
    "Queue": {"kind": "Queue", "name": "corpus-queue", "task_types": ["offload"], "order": 500},
    "SchedulingPolicy": {"kind": "SchedulingPolicy", "name": "default", "aging_per_hour": 0.5, "classes": {"gpu": {"placement": "pack"}}},
    "Task": {**TASK, "kind": "Task", "name": "corpus-spec-task", "tenant": "corpus-org"},
}
APPLY_FIRST = [k for k in SPEC_SAMPLES if k not in ("Task", "SchedulingPolicy")]


# -------------------------------------------------------------------------- the server
class Corpus:
    def __init__(self, app, admin: str, agent: str, task_id: str) -> None:
        self.admin = TestClient(app, headers={"Authorization": f"Bearer {admin}"}, raise_server_exceptions=False)
        self.agent = TestClient(app, headers={"Authorization": f"Bearer {agent}"}, raise_server_exceptions=False)
        self.task_id = task_id
        self.schema = app.openapi()

    def client(self, path: str) -> TestClient:
        return self.agent if path.startswith("/api/v1/agent/") else self.admin


@pytest.fixture(scope="module", params=DATABASES)
def corpus(request, tmp_path_factory) -> Iterator[Corpus]:
    """One server per database for the module: the demo inventory, the sample of each spec
    kind, a task, a user and an agent; no workers; no rate limit (thousands of requests)."""
    root = tmp_path_factory.mktemp(f"corpus-{request.param}")
    settings = Settings(data_dir=root / "data", database_url=database_url(request.param, root), run_workers=False, rate_limit_per_s=0)
    settings.data_dir.mkdir(parents=True)
    db = Database(settings.resolved_database_url())
    db.migrate()
    ctx = ServiceContext(settings=settings, db=db, clock=FixedClock(), backends={"local": LocalBackend(settings.backend_dir / "local")})
    with db.transaction() as session:
        admin = auth.ensure_admin(session, ctx.clock.now())
    app = create_app(ctx=ctx)
    with TestClient(app, headers={"Authorization": f"Bearer {admin}"}) as api:
        documents, sources = demo_documents()
        documents += [SPEC_SAMPLES[k] for k in APPLY_FIRST]
        applied = api.post("/api/v1/apply", json={"documents": documents})
        assert applied.status_code == 200, applied.text
        task = api.post("/api/v1/tasks", json=TASK)
        assert task.status_code == 201, task.text
        for user, role in (("corpus-user", "viewer"), ("corpus-agent", "agent")):
            tenant = None if role == "agent" else "ai-lab"
            assert api.post("/api/v1/users", json={"name": user, "bindings": [{"role": role, "tenant": tenant}]}).status_code == 201
        agent = api.post("/api/v1/users/corpus-agent/tokens", json={"label": "corpus"}).json()["token"]
        corpus = Corpus(app, admin, agent, task.json()["id"])
        registered = corpus.agent.post("/api/v1/agent/register", json=BODIES[("post", "/api/v1/agent/register")])
        assert registered.status_code == 200, registered.text
        yield corpus
    db.dispose()


# -------------------------------------------------------------------- sending and judging
def _wire(value: str) -> str:
    return quote(value, safe="", errors="surrogatepass")


def _bad_answer(response) -> str | None:
    """Why the answer breaks the contract, or None."""
    if response.status_code >= 500:
        return f"{response.status_code} {response.text[:200]}"
    if 400 <= response.status_code < 500:
        try:
            body = response.json()
        except ValueError:
            return f"{response.status_code} not JSON: {response.text[:200]}"
        if not (isinstance(body, dict) and body.get("code") and str(body.get("message", "")).strip()):
            return f"{response.status_code} without code/message: {response.text[:200]}"
    return None


def _shown(value: str | bytes) -> str:
    text = value if isinstance(value, str) else value.decode("latin-1")
    return ascii(text[:60] + (f"...({len(text)} chars)" if len(text) > 60 else ""))


def _operations() -> list[tuple[str, str, dict]]:
    """(method, path, operation) of every operation of the JSON API, read from a throwaway app."""
    root = Path(tempfile.mkdtemp(prefix="hetpool-corpus-schema-"))
    schema = create_app(Settings(data_dir=root / "data", database_url=f"sqlite:///{root / 'schema.db'}", run_workers=False)).openapi()
    found = []
    for path, item in schema["paths"].items():
        if re.match("^/(api/|healthz)", path):  # the dashboard's HTML and /metrics' text have no {code, message} errors
            found += [(method, path, operation) for method, operation in item.items()]
    return found


OPERATIONS = _operations()


def _benign(corpus: Corpus, path: str, name: str) -> str:
    """A valid value for a path parameter that is not the one under test."""
    if name == "task_id":
        return corpus.task_id
    if name == "kind":
        return "tenants"
    if name == "token_id":
        return "999999"
    if path.startswith("/api/v1/users/"):
        return "corpus-user"
    if path.startswith("/api/v1/pools/"):
        return "bj-a100-80g"
    if path.startswith("/api/v1/clusters/"):
        return "gz-general"
    return "corpus-none"


def _send(corpus: Corpus, method: str, path: str, params: dict[str, str], *, query: str = "", headers=None, body: bytes | None = None):
    url = path
    for name, value in params.items():
        url = url.replace("{" + name + "}", _wire(value))
    if query:
        url += "?" + query
    extra = dict(headers or {})
    if body is not None:
        extra.setdefault("Content-Type", "application/json")
    return corpus.client(path).request(method.upper(), url, content=body, headers=extra)


def _base_body(method: str, path: str, operation: dict, schema: dict) -> Any:
    if (method, path) in BODIES:
        return copy.deepcopy(BODIES[(method, path)])
    content = operation.get("requestBody", {}).get("content", {}).get("application/json")
    return _from_schema(content["schema"], schema) if content else None


def _from_schema(node: dict, schema: dict) -> Any:
    """A minimal value of a JSON schema: its required properties with simple values."""
    if "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
    for key in ("anyOf", "oneOf"):
        if key in node:
            return _from_schema(next(n for n in node[key] if n.get("type") != "null"), schema)
    if "enum" in node:
        return node["enum"][0]
    kind = node.get("type")
    if kind == "object":
        return {name: _from_schema(node["properties"][name], schema) for name in node.get("required", []) if name in node.get("properties", {})}
    return {"string": "corpus", "integer": 1, "number": 1.0, "boolean": True, "array": []}.get(kind, {})


def _leaf_paths(value: Any, prefix: tuple = (), depth: int = 4) -> list[tuple]:
    """Every place in a JSON value (mapping keys and list items, `depth` levels down)."""
    paths = []
    if depth and isinstance(value, dict):
        for key, child in value.items():
            paths.append((*prefix, key))
            paths += _leaf_paths(child, (*prefix, key), depth - 1)
    elif depth and isinstance(value, list):
        for i, child in enumerate(value[:2]):
            paths.append((*prefix, i))
            paths += _leaf_paths(child, (*prefix, i), depth - 1)
    return paths


MARK = "__hetpool_corpus__"


def _with_token(body: Any, place: tuple, token: bytes) -> bytes:
    """`body` as JSON bytes with the value at `place` replaced by the raw JSON `token`."""
    doc = copy.deepcopy(body)
    target = doc
    for step in place[:-1]:
        target = target[step]
    target[place[-1]] = MARK
    return json.dumps(doc).encode().replace(json.dumps(MARK).encode(), token, 1)


# ----------------------------------------------------------------------------- the tests
def _operation_id(op: tuple[str, str, dict]) -> str:
    return f"{op[0].upper()} {op[1]}"


@pytest.mark.parametrize("operation", OPERATIONS, ids=[_operation_id(o) for o in OPERATIONS])
def test_every_parameter_of_every_operation_survives_the_corpus(corpus: Corpus, operation: tuple[str, str, dict]) -> None:
    method, path, op = operation
    params = [p for p in op.get("parameters", []) if p["in"] in ("path", "query", "header")]
    path_names = [p["name"] for p in params if p["in"] == "path"]
    body = _base_body(method, path, op, corpus.schema)
    raw_body = None if body is None else json.dumps(body).encode()
    benign = {name: _benign(corpus, path, name) for name in path_names}
    bad = []
    for param in params:
        values = HEADER_TEXT if param["in"] == "header" else TEXT
        for value in values:
            if param["in"] == "path":
                answer = _send(corpus, method, path, {**benign, param["name"]: value}, body=raw_body)
            elif param["in"] == "query":
                answer = _send(corpus, method, path, benign, query=f"{_wire(param['name'])}={_wire(value)}", body=raw_body)
            else:
                answer = _send(corpus, method, path, benign, headers={param["name"]: value}, body=raw_body)
            problem = _bad_answer(answer)
            if problem:
                bad.append(f"{param['in']}.{param['name']}={_shown(value)} → {problem}")
    assert not bad, f"{method.upper()} {path}:\n" + "\n".join(bad)


BODY_OPERATIONS = [o for o in OPERATIONS if o[0] in ("post", "put", "patch") and ((o[0], o[1]) in BODIES or "requestBody" in o[2])]


@pytest.mark.parametrize("operation", BODY_OPERATIONS, ids=[_operation_id(o) for o in BODY_OPERATIONS])
def test_every_body_field_of_every_operation_survives_the_corpus(corpus: Corpus, operation: tuple[str, str, dict]) -> None:
    method, path, op = operation
    benign = {p["name"]: _benign(corpus, path, p["name"]) for p in op.get("parameters", []) if p["in"] == "path"}
    body = _base_body(method, path, op, corpus.schema)
    bad = []
    for raw in RAW_BODIES:
        problem = _bad_answer(_send(corpus, method, path, benign, body=raw))
        if problem:
            bad.append(f"body={_shown(raw)} → {problem}")
    places = _leaf_paths(body) if isinstance(body, (dict, list)) else []
    for place in places:
        for token in [*JSON, ONE_MB]:
            problem = _bad_answer(_send(corpus, method, path, benign, body=_with_token(body, place, token)))
            if problem:
                bad.append(f"body{''.join(f'[{s!r}]' for s in place)}={_shown(token)} → {problem}")
    assert not bad, f"{method.upper()} {path}:\n" + "\n".join(bad)


@pytest.mark.parametrize("kind", sorted(SPEC_SAMPLES))
def test_every_field_of_every_spec_kind_survives_the_corpus_through_apply(corpus: Corpus, kind: str) -> None:
    sample = SPEC_SAMPLES[kind]
    body = {"documents": [sample]}
    bad = []
    for place in _leaf_paths(sample):
        for token in JSON + ([ONE_MB] if place == ("command",) else []):
            answer = corpus.admin.post(
                "/api/v1/apply", content=_with_token(body, ("documents", 0, *place), token), headers={"Content-Type": "application/json"}
            )
            problem = _bad_answer(answer)
            if problem:
                bad.append(f"{kind}{''.join(f'[{s!r}]' for s in place)}={_shown(token)} → {problem}")
    assert not bad, f"apply {kind}:\n" + "\n".join(bad)
    # Nothing above may have left the server unable to answer the ordinary reads.
    for read in ("/api/v1/tasks", "/api/v1/budgets/status", "/api/v1/quotas/usage", "/api/v1/cost/report", "/api/v1/stats/capacity"):
        assert corpus.admin.get(read).status_code == 200, read
