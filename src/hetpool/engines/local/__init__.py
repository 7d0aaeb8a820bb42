"""The local engine: runs placed work as processes on this machine (`compute.py`). Its nodes
come from the host agent (hetpool.agent), so it has no inventory connector."""

from hetpool.engines.base import Engine
from hetpool.engines.local.compute import LocalBackend
from hetpool.engines.local.config import backend_config_problems

ENGINE = Engine(
    kind="local",
    compute=LocalBackend,
    build=lambda config, catalog, work_dir: LocalBackend(work_dir, config),
    config_problems=backend_config_problems,
)

__all__ = ["ENGINE", "LocalBackend"]
