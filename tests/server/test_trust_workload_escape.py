"""Issue 14, finding 1: a hostile member's task on the local backend tries to escape.

Through the public API only: tenant A's member runs a task that keeps a secret in its
working directory and stays running; tenant B's member then runs a task whose command
tries to (1) read the database (the SQLite file; on PostgreSQL, a connection without the
password), (2) read A's output log and A's working directory, (3) print the server's
environment, (4) write a platform-admin role binding for itself, and (5) signal A's
process and read its /proc environ. The task prints what each attempt did; the test reads
those lines from the task's logs and checks the outcome through the API.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
from urllib.parse import urlsplit, urlunsplit

from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from tests.server.helpers import drive_until, example_task, run_to_end

CANARY = "canary-6f1d0c2e-server-secret"


def _make_user(api: TestClient, name: str, tenant: str) -> TestClient:
    created = api.post("/api/v1/users", json={"name": name, "bindings": [{"role": "member", "tenant": tenant}]})
    assert created.status_code == 201, created.text
    token = api.post(f"/api/v1/users/{name}/tokens", json={"label": "escape-test"})
    assert token.status_code == 201, token.text
    return TestClient(api.app, headers={"Authorization": f"Bearer {token.json()['token']}"})


def _submit(client: TestClient, name: str, tenant: str, command: str) -> str:
    task = {**example_task("data-prep.yaml"), "name": name, "tenant": tenant, "command": command}
    response = client.post("/api/v1/tasks", json=task)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _logs(client: TestClient, task_id: str) -> str:
    response = client.get(f"/api/v1/tasks/{task_id}/logs", params={"limit": 1 << 20})
    assert response.status_code == 200, response.text
    return response.json()["text"]


def _without_password(url: str) -> str:
    """The database URL as a task could guess it: host, port, user and name, no password."""
    parts = urlsplit(url.replace("postgresql+psycopg://", "postgresql://"))
    netloc = f"{parts.username}@{parts.hostname}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _attempt(label: str, shell: str) -> str:
    """One escape attempt: prints `label:ESCAPED` if the shell snippet succeeds, else `label:denied`."""
    return f"if ( {shell} ) >/dev/null 2>&1; then echo {label}:ESCAPED; else echo {label}:denied; fi"


def _psql() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/psql")) or [shutil.which("psql") or "psql"]
    return found[-1]


def _db_attempts(ctx: ServiceContext, db_kind: str) -> list[str]:
    """Read and write attempts with clients any user can run (the server's own python may be
    unreachable for other users); a control line proves the client itself works."""
    url = ctx.settings.resolved_database_url()
    grant = (
        "INSERT INTO role_bindings (user_id, role, tenant, created_at, created_by) "
        "SELECT id, 'platform-admin', '', CURRENT_TIMESTAMP, 'escape' FROM users WHERE name = 'bob'"
    )
    if db_kind == "sqlite":
        path = shlex.quote(url.removeprefix("sqlite:///"))
        return [
            'echo "client:$(sqlite3 :memory: "SELECT 40+2")"',
            _attempt("db-read", f"head -c 100 {path}"),
            _attempt("db-write", f"sqlite3 {path} {shlex.quote(grant)}"),
        ]
    guessed = shlex.quote(_without_password(url))
    psql = shlex.quote(_psql())
    return [
        f'echo "client:$({psql} --version | grep -c PostgreSQL)"',
        _attempt("db-read", f"{psql} -w {guessed} -c 'SELECT name FROM users'"),
        _attempt("db-write", f"{psql} -w {guessed} -c {shlex.quote(grant)}"),
    ]


def test_a_members_task_cannot_read_the_db_other_tenants_output_or_the_server_env_nor_grant_itself_admin(
    ctx: ServiceContext, demo: TestClient, db_kind: str, monkeypatch
) -> None:
    # What a server would have in its environment: the database URL (with its password on
    # PostgreSQL) and some secret. None of it may reach a task.
    monkeypatch.setenv("HETPOOL_TEST_SECRET", CANARY)
    monkeypatch.setenv("HETPOOL_DATABASE_URL", ctx.settings.resolved_database_url())
    alice = _make_user(demo, "alice", "infra")
    bob = _make_user(demo, "bob", "ai-lab/nlp")

    # Tenant A: a task that keeps a secret in its working directory and stays running.
    a_id = _submit(alice, "a-holds-a-secret", "infra/data/etl", 'echo "pid=$$ wd=$PWD"; echo TOPSECRET-A > secret.txt; echo ready; exec sleep 120')
    drive_until(ctx, lambda: "ready" in _logs(alice, a_id), timeout_s=30)
    a_log = _logs(alice, a_id)
    a_pid, a_wd = re.search(r"pid=(\d+) wd=(\S+)", a_log).groups()
    a_job = demo.get(f"/api/v1/tasks/{a_id}").json()["job_id"]
    a_output = ctx.settings.backend_dir / "local" / "jobs" / a_job / "worker-0" / "output.log"
    assert a_output.is_file(), "the test must know where A's output log is"

    try:
        # Tenant B: the hostile member.
        attempts = [
            'echo "uid=$(id -u)"',
            *_db_attempts(ctx, db_kind),
            _attempt("other-log", f"head -c 10 {shlex.quote(str(a_output))}"),
            _attempt("other-workdir", f"cat {shlex.quote(a_wd)}/secret.txt || ls {shlex.quote(a_wd)}"),
            _attempt("signal-other", f"kill -0 {a_pid}"),
            _attempt("proc-environ", f"head -c 10 /proc/{a_pid}/environ"),
            "echo '--- env ---'; env; echo '--- end ---'",
        ]
        b_id = _submit(bob, "b-tries-to-escape", "ai-lab/nlp", "\n".join(attempts))
        finished = run_to_end(ctx, demo, b_id, timeout_s=60)
        b_log = _logs(bob, b_id)
        assert finished["state"] == "succeeded", (finished, b_log)

        # The database client ran (its failures below are refusals, not a missing tool).
        assert re.search(r"^client:(42|1)$", b_log, re.M), b_log
        results = dict(re.findall(r"^([a-z-]+):(ESCAPED|denied)$", b_log, re.M))
        expected = ["db-read", "db-write", "other-log", "other-workdir", "signal-other", "proc-environ"]
        assert results == {label: "denied" for label in expected}, b_log

        uid = int(re.search(r"^uid=(\d+)$", b_log, re.M).group(1))
        assert uid not in (0, os.geteuid()), f"the task ran as uid {uid}, the server's identity"
        env_text = b_log.split("--- env ---", 1)[1]
        assert CANARY not in env_text and "HETPOOL_TEST_SECRET" not in env_text
        assert "HETPOOL_DATABASE_URL" not in env_text and ctx.settings.resolved_database_url() not in env_text
        assert "HETPOOL_TENANT=ai-lab/nlp" in env_text  # the task's own variables are there
        assert "TOPSECRET-A" not in b_log

        # The write failed: bob is still a member only, and no platform-admin binding exists.
        assert {b["role"] for b in bob.get("/api/v1/whoami").json()["bindings"]} == {"member"}
        assert demo.get("/api/v1/users/bob").json()["bindings"] == [{"role": "member", "tenant": "ai-lab/nlp"}]
        assert bob.get("/api/v1/audit").status_code == 403  # a platform-level read still refused
    finally:
        assert demo.post(f"/api/v1/tasks/{a_id}/cancel").status_code in (200, 202)
        run_to_end(ctx, demo, a_id, timeout_s=30)


def test_a_local_clusters_run_as_settings_are_checked_at_apply(demo: TestClient) -> None:
    def apply(config: dict) -> dict:
        doc = {"kind": "Cluster", "name": "gz-general", "backend": "local", "zone": "gz", "backend_config": config}
        response = demo.post("/api/v1/apply", json={"documents": [doc]})
        assert response.status_code == 422, response.text
        body = response.json()
        assert body["code"] == "invalid_spec"
        return body["details"][0]

    assert apply({"run_as_user": "root"}) == {
        "loc": "Cluster/gz-general: backend_config.run_as_user",
        "msg": "user 'root' is uid 0: tasks never run as root",
    }
    assert apply({"run_as_user": "no-such-user"})["msg"].startswith("no user 'no-such-user' on this host")
    assert "contains uid 65534 of user 'nobody'" in apply({"run_as_uid_range": "65000-65600"})["msg"]
    assert apply({"run_as_uid_range": "10-20"})["msg"] == "10-20 must satisfy 1000 <= LOW <= HIGH <= 2147483646"
    assert apply({"rlimit_nofile": "many"}) == {"loc": "Cluster/gz-general: backend_config.rlimit_nofile", "msg": "'many' is not a whole number"}
    assert "never passed to tasks" in apply({"env_passthrough": "HETPOOL_DATABASE_URL"})["msg"]
    unknown = apply({"run_as": "me"})
    assert unknown["loc"] == "Cluster/gz-general: backend_config.run_as" and "known: env_passthrough" in unknown["msg"]


def test_a_local_clusters_backend_config_decides_who_its_tasks_run_as(ctx: ServiceContext, demo: TestClient) -> None:
    config = {"run_as_uid_range": "60950-60959"}
    doc = {"kind": "Cluster", "name": "gz-general", "backend": "local", "zone": "gz", "region": "south", "backend_config": config}
    assert demo.post("/api/v1/apply", json={"documents": [doc]}).status_code == 200
    task_id = _submit(demo, "which-uid", "infra/data/etl", "id -u")
    assert run_to_end(ctx, demo, task_id)["state"] == "succeeded"
    assert 60950 <= int(_logs(demo, task_id)) <= 60959


def test_the_server_keeps_its_data_dir_and_sqlite_database_private(tmp_path) -> None:
    from hetpool.server.app import make_context
    from hetpool.server.settings import Settings

    data = tmp_path / "open"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    ctx = make_context(Settings(data_dir=data, run_workers=False))
    try:
        assert data.stat().st_mode & 0o777 == 0o700
        assert (data / "hetpool.db").stat().st_mode & 0o777 == 0o600
    finally:
        ctx.db.dispose()
