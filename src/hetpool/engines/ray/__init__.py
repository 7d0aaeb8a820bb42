"""The Ray engine: placed work as Ray jobs through the dashboard's Jobs API (`compute.py`); nodes
and resources from the state API (`inventory.py`)."""

from hetpool.engines.base import Engine
from hetpool.engines.ray.compute import RayBackend, RayNeverFitsError
from hetpool.engines.ray.config import config_problems
from hetpool.engines.ray.inventory import RayConnector

ENGINE = Engine(kind="ray", compute=RayBackend, build=RayBackend, config_problems=config_problems, inventory=RayConnector)

__all__ = ["ENGINE", "RayBackend", "RayConnector", "RayNeverFitsError"]
