"""inventory_objects.agent_user_id: the agent that may report for a node (issue 14, finding 4)

Backfill: a Node that an agent user created (its last inventory.create event names a user
holding the agent role) and that no connector reports on becomes that agent's, in the
column and in the spec (`agent:`). Every other node stays the operator's: in particular an
operator's node whose node_status.source an agent flipped to 'agent' before this fix is not
handed to that agent. Node specs get `agent: null` and Pool specs `agents: []` where missing,
so the first apply after the upgrade does not see every stored document as changed.

Revision ID: 20261201_0008c
Revises: 20261130_0007a, 20261130_0007b
Create Date: 2026-12-01 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "20261201_0008c"
down_revision = ("20261130_0007a", "20261130_0007b")
branch_labels = None
depends_on = None

_objects = sa.table(
    "inventory_objects", sa.column("id"), sa.column("kind"), sa.column("name"), sa.column("spec", sa.JSON), sa.column("agent_user_id")
)


def _agents(conn) -> dict[str, int]:
    """Users holding the agent role (by binding, or by the display role of old rows)."""
    rows = conn.execute(
        sa.text(
            "SELECT u.name, u.id FROM users u WHERE u.role = 'agent' "
            "OR EXISTS (SELECT 1 FROM role_bindings b WHERE b.user_id = u.id AND b.role = 'agent')"
        )
    ).all()
    return {name: user_id for name, user_id in rows}


def _creators(conn) -> dict[str, str]:
    rows = conn.execute(
        sa.text("SELECT object_id, actor FROM audit_events WHERE action = 'inventory.create' AND object_kind = 'Node' ORDER BY id")
    ).all()
    return {node: actor for node, actor in rows}  # the last creation wins (a node deleted and made again)


def upgrade() -> None:
    with op.batch_alter_table("inventory_objects") as batch:
        batch.add_column(sa.Column("agent_user_id", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_inventory_objects_agent_user_id", "users", ["agent_user_id"], ["id"], ondelete="SET NULL")
        batch.create_index("ix_inventory_objects_agent_user_id", ["agent_user_id"])
    conn = op.get_bind()
    agents, creators = _agents(conn), _creators(conn)
    sources = dict(conn.execute(sa.text("SELECT node, source FROM node_status")).all())
    for row in conn.execute(
        sa.select(_objects.c.id, _objects.c.kind, _objects.c.name, _objects.c.spec).where(_objects.c.kind.in_(["Node", "Pool"]))
    ).all():
        spec = dict(row.spec or {})
        values: dict = {}
        if row.kind == "Pool":
            if "agents" in spec:
                continue
            spec["agents"] = []
        else:
            creator = creators.get(row.name)
            owned = creator in agents and sources.get(row.name, "agent") == "agent"
            spec["agent"] = creator if owned else spec.get("agent")
            values["agent_user_id"] = agents[creator] if owned else None
        conn.execute(_objects.update().where(_objects.c.id == row.id).values(spec=spec, **values))


def downgrade() -> None:
    conn = op.get_bind()
    for row in conn.execute(sa.select(_objects.c.id, _objects.c.kind, _objects.c.spec).where(_objects.c.kind.in_(["Node", "Pool"]))).all():
        spec = {k: v for k, v in (row.spec or {}).items() if k not in ("agent", "agents")}
        conn.execute(_objects.update().where(_objects.c.id == row.id).values(spec=spec))
    with op.batch_alter_table("inventory_objects") as batch:
        batch.drop_index("ix_inventory_objects_agent_user_id")
        batch.drop_constraint("fk_inventory_objects_agent_user_id", type_="foreignkey")
        batch.drop_column("agent_user_id")
