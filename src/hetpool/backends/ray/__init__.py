"""The Ray backend: runs placed work as Ray jobs through the dashboard's Jobs API (see `backend.py`)."""

from hetpool.backends.ray.backend import RayBackend, RayNeverFitsError

__all__ = ["RayBackend", "RayNeverFitsError"]
