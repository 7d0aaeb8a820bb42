"""The local backend: runs placed work as processes on this machine (see `backend.py`)."""

from hetpool.backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]
