"""Persistence: SQLAlchemy 2 models, engine/session setup and the Alembic tree."""
