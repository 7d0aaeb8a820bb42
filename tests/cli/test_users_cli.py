"""`hetpool users / tokens / whoami` (the CLI app, in-process) against a real server: the admin
creates a member and its token; the member works inside its subtree only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from tests.cli.test_cli_e2e import Server
from tests.conftest import TASKS_DIR, database_url

# The CLI is the same on both databases; the API tests cover PostgreSQL (this keeps the suite short).
pytestmark = pytest.mark.parametrize("db_kind", ["sqlite"])


@pytest.fixture
def server(db_kind: str, tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "data", database_url(db_kind, tmp_path))
    srv.start()
    yield srv
    srv.stop()


def run_as(server: Server, token: str | None, *args: str) -> Result:
    """The CLI in this process (a fresh interpreter per call costs seconds) against the real server."""
    from hetpool.cli.main import app

    return CliRunner().invoke(app, list(args), env={"HETPOOL_URL": server.url, "HETPOOL_TOKEN": token or server.token or "", "COLUMNS": "200"})


def test_users_tokens_and_whoami_through_the_cli(server: Server) -> None:
    created = run_as(server, None, "users", "create", "alice", "--role", "member", "--tenant", "ai-lab/nlp").stdout
    assert "user/alice: member@ai-lab/nlp" in created
    bad = run_as(server, None, "users", "create", "bob", "--role", "owner")
    assert bad.exit_code == 2 and "--role: unknown role 'owner'; roles: platform-admin, tenant-admin, member, viewer, auditor, agent" in bad.stderr
    token = run_as(server, None, "tokens", "create", "--user", "alice", "--label", "laptop", "--expires", "30d").stdout.strip()
    assert token.startswith("hp_") and len(token.splitlines()) == 1

    me = run_as(server, token, "whoami").stdout
    assert me.startswith("alice (member, via token): member@ai-lab/nlp") and "task.submit: ai-lab/nlp" in me
    refused = run_as(server, token, "submit", "-f", str(TASKS_DIR / "data-prep.yaml"))
    assert refused.exit_code == 1 and "403 permission_denied" in refused.stderr and "task.submit on tenant 'infra/data/etl'" in refused.stderr

    bound = json.loads(run_as(server, None, "users", "bind", "alice", "--bind", "viewer=infra", "-o", "json").stdout)
    assert bound["bindings"] == [{"role": "member", "tenant": "ai-lab/nlp"}, {"role": "viewer", "tenant": "infra"}]
    assert "user/alice: member@ai-lab/nlp" in run_as(server, None, "users", "unbind", "alice", "--role", "viewer", "--tenant", "infra").stdout

    [mine] = json.loads(run_as(server, token, "tokens", "list", "-o", "json").stdout)
    assert mine["label"] == "laptop" and mine["state"] == "active" and mine["last_used_at"] and "token" not in mine
    assert "revoked" in run_as(server, token, "tokens", "revoke", str(mine["id"])).stdout
    gone = run_as(server, token, "whoami")
    assert gone.exit_code == 1 and "401" in gone.stderr and "revoked" in gone.stderr
