"""Issue 14, finding 4: an agent token is bound to its own nodes.

An agent (a user holding the `agent` role) may register and heartbeat only the nodes it
created itself or that an operator assigned to it (`agent:` on the Node spec). Operator
nodes, another agent's nodes and nodes a connector imports are refused with 403
`node_not_owned`, nothing changes, and the refusal is audited. Adding a node to an
operator's pool needs the pool to name the agent (`agents:` on the Pool spec)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from fastapi.testclient import TestClient

from hetpool.engines.base import ObservedNode
from hetpool.server.db.session import alembic_config, make_engine
from hetpool.server.services.connector_sync import sync_cluster
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.nodes import mark_offline
from tests.conftest import database_url
from tests.server.test_access_api import make_user
from tests.server.test_connector_sync import ScriptedConnector

CUDA = {"driver": "550.54.15", "runtime": {"name": "cuda", "version": "12.4"}, "frameworks": {"pytorch": "2.5.1", "vllm": "0.6.4.post1"}}
OWN = {
    "name": "agent-node-1",
    "cluster": "bj-train",
    "cpu_cores": 32,
    "memory_gb": 256,
    "devices": [{"model": "nvidia-h800", "count": 2}],
    "stack": CUDA,
}
ABNORMAL = [{"index": 0, "model": "nvidia-a100-80g", "health": "abnormal"}]


def _snapshot(api: TestClient, node: str) -> tuple[dict, dict | None]:
    """The node's spec and its status row (None when it has none)."""
    spec = api.get(f"/api/v1/objects/nodes/{node}").json()
    status = next((s for s in api.get("/api/v1/nodes/status").json() if s["node"] == node), None)
    return spec, status


def _refused(response, node: str, owner: str) -> None:
    assert response.status_code == 403, response.text
    body = response.json()
    assert body["code"] == "node_not_owned" and f"node {node!r}" in body["message"] and owner in body["message"], body
    assert "hp_" not in body["message"]


def _refusals(api: TestClient, node: str) -> list[dict]:
    return api.get("/api/v1/audit", params={"object_id": node, "action": "agent.refused"}).json()


def test_an_agent_cannot_heartbeat_or_empty_an_operator_node(ctx: ServiceContext, demo: TestClient) -> None:
    agent = make_user(demo, "agent-a", ("agent", None))
    before = _snapshot(demo, "gpu-a01")
    assert before[1] is None  # operator-defined: no agent reports on it

    _refused(agent.post("/api/v1/agent/heartbeat", json={"node": "gpu-a01", "devices": ABNORMAL}), "gpu-a01", "operator")
    takeover = {"name": "gpu-a01", "cluster": "bj-train", "cpu_cores": 1, "memory_gb": 1, "devices": []}
    _refused(agent.post("/api/v1/agent/register", json={"node": takeover}), "gpu-a01", "operator")

    assert _snapshot(demo, "gpu-a01") == before  # devices, source and state untouched
    ctx.clock.advance(ctx.settings.heartbeat_timeout_s + 1)
    assert "gpu-a01" not in mark_offline(ctx)
    assert demo.post("/api/v1/tasks/plan", json=_a100_task()).json()["feasible"] is True
    refusals = _refusals(demo, "gpu-a01")
    assert [(e["actor"], e["after"]["call"], e["after"]["owner"]) for e in refusals] == [
        ("agent-a", "heartbeat", "operator"),
        ("agent-a", "register", "operator"),
    ]


def test_an_agent_cannot_touch_another_agents_node(demo: TestClient) -> None:
    a = make_user(demo, "agent-a", ("agent", None))
    b = make_user(demo, "agent-b", ("agent", None))
    assert a.post("/api/v1/agent/register", json={"node": OWN}).status_code == 200
    before = _snapshot(demo, OWN["name"])

    _refused(b.post("/api/v1/agent/heartbeat", json={"node": OWN["name"], "devices": ABNORMAL}), OWN["name"], "another agent")
    _refused(b.post("/api/v1/agent/register", json={"node": {**OWN, "devices": []}}), OWN["name"], "another agent")
    assert _snapshot(demo, OWN["name"]) == before
    assert "agent-a" not in b.post("/api/v1/agent/heartbeat", json={"node": OWN["name"]}).json()["message"]


def test_an_agents_own_node_works_and_records_its_owner(ctx: ServiceContext, demo: TestClient) -> None:
    a = make_user(demo, "agent-a", ("agent", None))
    assert a.post("/api/v1/agent/register", json={"node": OWN}).status_code == 200
    assert demo.get(f"/api/v1/objects/nodes/{OWN['name']}").json()["agent"] == "agent-a"
    beat = {"node": OWN["name"], "devices": [{"index": 1, "model": "nvidia-h800", "health": "abnormal"}]}
    assert a.post("/api/v1/agent/heartbeat", json=beat).json() == {"node": OWN["name"], "state": "ready"}
    ctx.clock.advance(ctx.settings.heartbeat_timeout_s + 1)
    assert mark_offline(ctx) == [OWN["name"]]
    assert a.post("/api/v1/agent/heartbeat", json={"node": OWN["name"]}).json()["state"] == "ready"
    smaller = {**OWN, "devices": [{"model": "nvidia-h800", "count": 1}]}
    assert a.post("/api/v1/agent/register", json={"node": smaller}).status_code == 200
    assert demo.get(f"/api/v1/objects/nodes/{OWN['name']}").json()["devices"][0]["count"] == 1
    # It may not hand its node to another agent, nor claim one for another.
    other = a.post("/api/v1/agent/register", json={"node": {**OWN, "name": "agent-node-2", "agent": "agent-b"}})
    assert other.status_code == 422 and "node.agent" in other.json()["message"] and "agent-a" in other.json()["message"]
    assert demo.get("/api/v1/objects/nodes/agent-node-2").status_code == 404


def test_an_operator_assigned_node_works_for_that_agent_only(demo: TestClient) -> None:
    a = make_user(demo, "agent-a", ("agent", None))
    b = make_user(demo, "agent-b", ("agent", None))
    make_user(demo, "viewer-v", ("viewer", "ai-lab"))
    node = {**demo.get("/api/v1/objects/nodes/gpu-h01").json(), "agent": "agent-a"}
    assert demo.post("/api/v1/apply", json={"documents": [node]}).status_code == 200
    assert a.post("/api/v1/agent/heartbeat", json={"node": "gpu-h01"}).status_code == 200
    _refused(b.post("/api/v1/agent/heartbeat", json={"node": "gpu-h01"}), "gpu-h01", "another agent")
    # The assigned agent re-registers it: the assignment stays.
    mine = {k: v for k, v in node.items() if k not in ("kind", "agent")}
    assert a.post("/api/v1/agent/register", json={"node": mine}).status_code == 200
    assert demo.get("/api/v1/objects/nodes/gpu-h01").json()["agent"] == "agent-a"
    # A platform-admin re-assigns it to b: a is refused from then on.
    assert demo.post("/api/v1/apply", json={"documents": [{**node, "agent": "agent-b"}]}).status_code == 200
    assert b.post("/api/v1/agent/heartbeat", json={"node": "gpu-h01"}).status_code == 200
    _refused(a.post("/api/v1/agent/heartbeat", json={"node": "gpu-h01"}), "gpu-h01", "another agent")
    # The assignment names an existing agent.
    for who, why in (("nobody", "no user 'nobody'"), ("viewer-v", "holds no agent role")):
        bad = demo.post("/api/v1/apply", json={"documents": [{**node, "agent": who}]})
        assert bad.status_code == 422 and "Node/gpu-h01: agent" in bad.json()["message"] and why in bad.json()["message"], bad.text


def test_a_connector_imported_node_is_refused(ctx: ServiceContext, demo: TestClient) -> None:
    cluster = {"kind": "Cluster", "name": "hpc", "backend": "slurm", "backend_config": {"conf": "/nonexistent/slurm.conf", "sync": "off"}}
    assert demo.post("/api/v1/apply", json={"documents": [cluster]}).status_code == 200
    sync_cluster(ctx, "hpc", ScriptedConnector([ObservedNode("gpu-s1", 64, 512, devices={"nvidia-a100-80g": 4})]))
    agent = make_user(demo, "agent-a", ("agent", None))
    before = _snapshot(demo, "gpu-s1")
    assert before[1]["source"] == "slurm"
    _refused(agent.post("/api/v1/agent/heartbeat", json={"node": "gpu-s1", "devices": ABNORMAL}), "gpu-s1", "slurm connector")
    node = {"name": "gpu-s1", "cluster": "hpc", "cpu_cores": 1, "memory_gb": 1}
    _refused(agent.post("/api/v1/agent/register", json={"node": node}), "gpu-s1", "slurm connector")
    assert _snapshot(demo, "gpu-s1") == before


def test_joining_an_operator_pool_needs_the_pool_to_name_the_agent(demo: TestClient) -> None:
    agent = make_user(demo, "agent-a", ("agent", None))
    pool = demo.get("/api/v1/objects/pools/bj-h800").json()
    refused = agent.post("/api/v1/agent/register", json={"node": OWN, "pool": "bj-h800"})
    assert refused.status_code == 403 and refused.json()["code"] == "pool_not_open", refused.text
    assert "pool 'bj-h800'" in refused.json()["message"] and "agents" in refused.json()["message"]
    assert demo.get(f"/api/v1/objects/nodes/{OWN['name']}").status_code == 404  # nothing half-done
    assert demo.get("/api/v1/objects/pools/bj-h800").json() == pool

    assert demo.post("/api/v1/apply", json={"documents": [{**pool, "agents": ["agent-a"]}]}).status_code == 200
    assert agent.post("/api/v1/agent/register", json={"node": OWN, "pool": "bj-h800"}).status_code == 200
    joined = demo.get("/api/v1/objects/pools/bj-h800").json()
    assert joined["nodes"] == [*pool["nodes"], OWN["name"]]
    assert (joined["stack"], joined["price_per_hour"]) == (pool["stack"], pool["price_per_hour"])
    # A node whose stack differs cannot join (the pool's stack is the operator's).
    odd = {**OWN, "name": "agent-node-3", "stack": {**CUDA, "driver": "535.0"}}
    assert agent.post("/api/v1/agent/register", json={"node": odd, "pool": "bj-h800"}).status_code == 422
    assert demo.get("/api/v1/objects/pools/bj-h800").json() == joined


def test_a_platform_admin_still_reports_for_any_node(demo: TestClient) -> None:
    assert demo.post("/api/v1/agent/heartbeat", json={"node": "gpu-a01"}).status_code == 200


def _table(name: str, *columns: str, json: tuple[str, ...] = ()) -> sa.TableClause:
    return sa.table(name, *(sa.column(c, sa.JSON) if c in json else sa.column(c) for c in columns))


def test_agent_nodes_registered_before_the_upgrade_get_their_owner(db_kind: str, tmp_path: Path) -> None:
    """Migration 20261201_0008c: a node an agent created (its inventory.create event names
    an agent user) is backfilled as that agent's; an operator node an agent took over
    (source flipped to agent) is not."""
    users = _table("users", "id", "name", "role", "created_at")
    bindings = _table("role_bindings", "user_id", "role", "tenant", "created_at", "created_by")
    nodes = _table("inventory_objects", "kind", "name", "spec", "generation", "created_at", "updated_at", json=("spec",))
    events = _table("audit_events", "ts", "actor", "action", "object_kind", "object_id", "prev_hash", "hash")
    status = _table("node_status", "node", "state", "last_heartbeat_at", "agent_version", "devices", "source", json=("devices",))
    url = database_url(db_kind, tmp_path)
    engine = make_engine(url)
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "20261130_0007a")
        command.upgrade(cfg, "20261130_0007b")
        now = datetime(2026, 11, 30, tzinfo=UTC)
        conn.execute(users.insert().values(id=7, name="agent-old", role="agent", created_at=now))
        conn.execute(bindings.insert().values(user_id=7, role="agent", tenant="", created_at=now, created_by="admin"))
        for name, creator in (("old-agent-node", "agent-old"), ("operator-node", "admin")):
            spec = {"kind": "Node", "name": name, "cluster": "c", "cpu_cores": 1, "memory_gb": 1}
            conn.execute(nodes.insert().values(kind="Node", name=name, spec=spec, generation=1, created_at=now, updated_at=now))
            event = {"ts": now, "actor": creator, "action": "inventory.create", "object_kind": "Node", "object_id": name, "prev_hash": "", "hash": ""}
            conn.execute(events.insert().values(**event))
            conn.execute(status.insert().values(node=name, state="ready", last_heartbeat_at=now, agent_version="", devices=[], source="agent"))
        command.upgrade(cfg, "20261201_0008c")
        rows = dict(conn.execute(sa.text("SELECT name, agent_user_id FROM inventory_objects WHERE kind = 'Node'")).all())
        specs = {r.name: r.spec for r in conn.execute(sa.select(nodes.c.name, nodes.c.spec).where(nodes.c.kind == "Node"))}
    engine.dispose()
    assert rows == {"old-agent-node": 7, "operator-node": None}
    assert specs["old-agent-node"]["agent"] == "agent-old" and specs["operator-node"]["agent"] is None


def _a100_task() -> dict:
    return {
        "name": "needs-a100",
        "tenant": "ai-lab/nlp/llm-sft",
        "type": "training",
        "image": "registry.local/pt:2.5",
        "per_worker": {"devices": {"class": "gpu", "models": ["nvidia-a100-80g"], "count": 1}},
        "exclude_nodes": ["gpu-a02"],
    }


def test_the_cli_agent_with_an_agent_token(tmp_path: Path) -> None:
    """`hetpool agent` holding only an agent token registers and keeps its own node alive,
    and is told clearly when it points at an operator's node."""
    from tests.cli.test_cli_e2e import Server

    srv = Server(tmp_path / "data", database_url("sqlite", tmp_path))
    srv.start()
    try:
        srv.cli("users", "create", "agent-cli", "--role", "agent")
        token = srv.cli("tokens", "create", "--user", "agent-cli", "--label", "host").stdout
        agent_token = next(word for word in token.split() if word.startswith("hp_"))
        admin_token, srv.token = srv.token, agent_token
        out = srv.cli("agent", "--cluster", "gz-general", "--name", "agent-cli-1", "--once")
        assert "registered node agent-cli-1" in out.stdout
        assert srv.cli("agent", "--cluster", "gz-general", "--name", "agent-cli-1", "--once").returncode == 0
        bad = srv.cli("agent", "--cluster", "gz-general", "--name", "cpu-01", "--once", check=False)
        assert bad.returncode != 0 and "node 'cpu-01'" in bad.stderr + bad.stdout and "operator" in bad.stderr + bad.stdout
        srv.token = admin_token
        node = srv.cli("describe", "node", "agent-cli-1", "-o", "json").stdout
        assert '"agent": "agent-cli"' in node
    finally:
        srv.stop()
