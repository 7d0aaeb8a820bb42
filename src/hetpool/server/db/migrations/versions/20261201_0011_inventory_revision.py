"""inventory_revision: one counter the database bumps on every inventory write (issue 17)

Revision ID: 20261201_0011_inventory_revision
Revises: 20261201_0010_trace_context
Create Date: 2026-12-01 22:00:00

The per-process cluster-state cache (services/cluster_state.py) is keyed by this one
number. It is bumped by triggers, not by the code paths that write inventory rows, so no
path (apply, delete, agent registration, connector sync, automatic pools, a hand edit in
psql) can forget it, and it never repeats a value: the fingerprint it replaces (count,
sum of generations, max id) stayed the same on SQLite when the last object was deleted
and another created, since SQLite reuses the highest rowid.

A later SQLite batch_alter_table on inventory_objects rebuilds the table and drops these
triggers: such a migration must create them again (tests/server/test_cluster_state.py
fails if they are gone).
"""

import sqlalchemy as sa
from alembic import op

revision = "20261201_0011_inventory_revision"
down_revision = "20261201_0010_trace_context"
branch_labels = None
depends_on = None

BUMP = "UPDATE inventory_revision SET revision = revision + 1 WHERE id = 1"


def upgrade() -> None:
    table = op.create_table(
        "inventory_revision",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("revision", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.bulk_insert(table, [{"id": 1, "revision": 0}])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"CREATE FUNCTION hetpool_bump_inventory_revision() RETURNS trigger AS $$ BEGIN {BUMP}; RETURN NULL; END $$ LANGUAGE plpgsql")
        op.execute(
            "CREATE TRIGGER inventory_objects_revision AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON inventory_objects "
            "FOR EACH STATEMENT EXECUTE PROCEDURE hetpool_bump_inventory_revision()"
        )
    else:
        for event in ("insert", "update", "delete"):
            op.execute(f"CREATE TRIGGER inventory_objects_revision_{event} AFTER {event.upper()} ON inventory_objects BEGIN {BUMP}; END")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER inventory_objects_revision ON inventory_objects")
        op.execute("DROP FUNCTION hetpool_bump_inventory_revision()")
    else:
        for event in ("insert", "update", "delete"):
            op.execute(f"DROP TRIGGER inventory_objects_revision_{event}")
    op.drop_table("inventory_revision")
