"""A typed HTTP client for the hetpool API (what the CLI is built on)."""

from hetpool.client.http import ApiError, HetpoolClient

__all__ = ["ApiError", "HetpoolClient"]
