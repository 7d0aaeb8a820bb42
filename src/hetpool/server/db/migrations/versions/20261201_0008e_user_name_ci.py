"""users: names unique ignoring case (a unique index on lower(name))

`Admin` beside `admin` would pass for the platform-admin in every audit record, approval
and user list. The API refuses such a name; this index makes the database refuse it too,
whoever writes. A database that already holds names differing only in case is not
changed: the upgrade stops and lists them, and an operator decides which to rename or
delete (silently dropping a user would drop its roles and tokens).

Revision ID: 20261201_0008e
Revises: 20261130_0007a, 20261130_0007b
Create Date: 2026-12-01 10:00:00
"""

import sqlalchemy as sa
from alembic import op

from hetpool.core.errors import ConflictError

revision = "20261201_0008e"
down_revision = ("20261130_0007a", "20261130_0007b")
branch_labels = None
depends_on = None

INDEX = "uq_users_name_lower"


def case_duplicates(connection) -> list[list[str]]:
    """Groups of user names equal ignoring case, each sorted, in name order."""
    rows = connection.execute(
        sa.text(
            "SELECT name FROM users WHERE lower(name) IN "
            "(SELECT lower(name) FROM users GROUP BY lower(name) HAVING count(*) > 1) ORDER BY lower(name), name"
        )
    ).scalars()
    groups: dict[str, list[str]] = {}
    for name in rows:
        groups.setdefault(name.lower(), []).append(name)
    return list(groups.values())


def upgrade() -> None:
    duplicates = case_duplicates(op.get_bind())
    if duplicates:
        listed = "; ".join(", ".join(repr(n) for n in group) for group in duplicates)
        raise ConflictError(
            f"cannot make user names unique ignoring case: these users differ only in case: {listed}. "
            "Nothing was changed. Keep one of each group: delete the others (hetpool users delete NAME) "
            "or rename them in the users table, then run `hetpool db upgrade` again.",
            details=[{"loc": "users.name", "msg": ", ".join(group)} for group in duplicates],
        )
    op.create_index(INDEX, "users", [sa.text("lower(name)")], unique=True)


def downgrade() -> None:
    op.drop_index(INDEX, table_name="users")
