"""The Slurm engine: one sbatch per task on a real Slurm cluster (`compute.py`); nodes, GRES and
partitions from scontrol (`inventory.py`)."""

from hetpool.engines.base import Engine
from hetpool.engines.slurm.compute import SlurmBackend, SlurmError
from hetpool.engines.slurm.inventory import SlurmConnector
from hetpool.engines.slurm.runas import config_problems

ENGINE = Engine(kind="slurm", compute=SlurmBackend, build=SlurmBackend, config_problems=config_problems, inventory=SlurmConnector)

__all__ = ["ENGINE", "SlurmBackend", "SlurmConnector", "SlurmError"]
