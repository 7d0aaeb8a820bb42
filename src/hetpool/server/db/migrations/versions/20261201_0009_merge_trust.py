"""Merge the issue-14 (trust) branches into one head

Revision ID: 20261201_0009
Revises: 20261201_0008b, 20261201_0008c, 20261201_0008d, 20261201_0008e
Create Date: 2026-12-01 16:00:00

Separation of duties (0008b), agent-owned nodes (0008c), dashboard sessions (0008d) and
case-insensitive user names (0008e) were written side by side; this revision only joins
them, so `hetpool db current` shows one head again.
"""

revision = "20261201_0009"
down_revision = ("20261201_0008b", "20261201_0008c", "20261201_0008d", "20261201_0008e")
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
