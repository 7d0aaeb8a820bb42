"""Alembic environment: one migration tree for SQLite and PostgreSQL.

The engine's connection is handed in through `config.attributes["connection"]` by
`hetpool.server.db.session.migrate`; the URL form is for running `alembic` by hand.
"""

from alembic import context
from sqlalchemy import engine_from_config, pool

from hetpool.server.db.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite needs batch ALTERs
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    engine = engine_from_config(config.get_section(config.config_ini_section, {}), prefix="sqlalchemy.", poolclass=pool.NullPool)
    with engine.connect() as conn:
        _run(conn)
