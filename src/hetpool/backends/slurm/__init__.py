"""The Slurm backend: one sbatch per task on a real Slurm cluster (see `backend.py`)."""

from hetpool.backends.slurm.backend import SlurmBackend, SlurmError

__all__ = ["SlurmBackend", "SlurmError"]
