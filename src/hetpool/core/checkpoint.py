"""A task's checkpoint contract: how it wants to be stopped, and whether it resumes.

A task that declares `checkpoint` is stopped gracefully when hetpool takes its devices back
(preemption, reclaim, migration): the backend sends `signal` to its processes, waits
`grace` for them to write a checkpoint and exit, then kills what is left. The task goes
back to its queue as a *resume*: the next attempt gets HETPOOL_RESUME=1, the attempt it
resumes from and the same HETPOOL_CHECKPOINT_DIR, and the time it already ran counts as
done work (docs/scheduling.md "Checkpoints and resume").

The grace is bounded: it is time the preemptor waits for devices it was promised, so a
tenant cannot hold devices for hours by declaring a long one.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cached_property

from pydantic import Field, field_validator

from hetpool.core.base import SpecModel
from hetpool.core.limits import bounded
from hetpool.core.units import parse_duration

MIN_GRACE_S = 1.0
MAX_GRACE_S = 3600.0
DEFAULT_GRACE = "120s"


class StopSignal(StrEnum):
    """The signals a training loop commonly catches to checkpoint (PyTorch Lightning and
    torchelastic use SIGTERM and SIGUSR1; Slurm's --signal is usually USR1)."""

    SIGTERM = "SIGTERM"
    SIGUSR1 = "SIGUSR1"
    SIGUSR2 = "SIGUSR2"
    SIGINT = "SIGINT"


class CheckpointSpec(SpecModel):
    signal: StopSignal = Field(default=StopSignal.SIGTERM, description="sent to the task's processes first: SIGTERM, SIGUSR1, SIGUSR2 or SIGINT")
    grace: str | bounded(
        MIN_GRACE_S, le=MAX_GRACE_S
    ) = Field(default=DEFAULT_GRACE, description="time to checkpoint and exit after the signal: '120s', '5m'; 1s to 1h")
    resume: bool = Field(default=True, description="requeue a stopped task as a resume (HETPOOL_RESUME=1), its progress kept")

    @field_validator("signal", mode="before")
    @classmethod
    def _signal_name(cls, value: object) -> object:
        # "USR1", "sigusr1" and "SIGUSR1" are all common spellings (scancel takes "USR1").
        if isinstance(value, str):
            text = value.strip().upper()
            value = text if text.startswith("SIG") else f"SIG{text}"
        return value

    @field_validator("grace")
    @classmethod
    def _grace(cls, value: str | float) -> str | float:
        seconds = parse_duration(value, max_s=MAX_GRACE_S)
        if seconds < MIN_GRACE_S:
            raise ValueError(f"grace {value!r} is shorter than {MIN_GRACE_S:g} s; allowed: 1s to 1h")
        return value

    @cached_property
    def grace_s(self) -> float:
        return parse_duration(self.grace, max_s=MAX_GRACE_S)
