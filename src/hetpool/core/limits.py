"""Upper bounds for every number a user can write, in one place.

Why bounds at all: one member's task is evaluated by the scheduler together with everyone
else's, so a number that makes arithmetic fail (a runtime that overflows a date, an
infinite price that turns a sum into NaN) would stop scheduling or billing for every
tenant. Each bound is sized to the largest real estate or spend we can imagine, with room
to spare; the API refuses anything beyond it with a 422 naming the field and the limit,
and NaN and ±Infinity are refused everywhere.

Why these values: runtimes and other periods of a year (a lease, an approval, a reclaim
rule longer than that is a mistake, and a year keeps every "now + duration" far from the
end of the calendar even when divided by the slowest device's relative performance);
counts a little above the largest machines sold (4,096 cores, 64 TiB of memory, 1,024
devices per node); prices and amounts large enough for any currency without letting a
ledger row's integer micro-units overflow 64 bits.

docs/api.md ("Limits") and docs/operations-security.md list the same values; the tests
import them from here.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

DAY_S = 86_400

# ---------------------------------------------------------------------------- durations
MAX_DURATION_S = 366 * DAY_S  # runtime_estimate, max_runtime, approval expiry, reclaim idle_for / notice / lease
MAX_ANY_DURATION_S = 3650 * DAY_S  # whatever parse_duration reads (API token lifetimes go up to 10 years)

# ------------------------------------------------------------------------------ counts
MAX_WORKERS = 1024  # workers of one task (gang)
MAX_DEVICES_PER_WORKER = 64
MAX_DEVICES_PER_NODE = 1024  # a DeviceGroup's count; device indices and island ids stay below it
MAX_CPU_CORES = 4096  # per worker and per node
MAX_MEMORY_GB = 65_536  # per worker and per node (64 TiB)
MAX_DEVICE_MEMORY_GB = 4096  # one device's memory (today's largest: under 300 GB)
MAX_DEVICES_PER_TASK = MAX_WORKERS * MAX_DEVICES_PER_WORKER  # ApprovalPolicy.max_devices
MAX_DEVICE_FIGURE = 1_000_000  # TFLOPS, TOPS, GB/s, cores of one device model
MAX_QUEUE_ORDER = 1_000_000  # |Queue.order|

# ------------------------------------------------------------------- factors and shares
MIN_RELATIVE_PERFORMANCE = 0.001  # a runtime divided by it stays within a few centuries
MAX_RELATIVE_PERFORMANCE = 1000.0

# --------------------------------------------------------------------- prices and money
MAX_PRICE_PER_HOUR = 1_000_000.0  # per device-hour, CPU-core-hour or GiB-hour, any currency
MAX_AMOUNT = 1e12  # a budget's amount: 1e18 micro-units, below 2**63
MAX_QUOTA_AMOUNT = 1e9  # nominal / borrowing / lending of a quota limit (devices, cores or GB)


def _finite(limit: str):
    """Refuse NaN and ±Infinity before pydantic's own checks, with a message that names the
    limit (a JSON `Infinity`, `1e309` or a YAML `.inf` all arrive as float('inf'))."""

    def check(value: Any) -> Any:
        number = value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                return value  # not a number at all: pydantic says so
        if isinstance(number, float) and not math.isfinite(number):
            raise ValueError(f"must be a finite number {limit} (NaN and ±Infinity are refused)")
        return value

    return BeforeValidator(check)


def _shown(limit: float) -> str:
    """A limit as pydantic's own messages write it: 1000000, not 1e+06."""
    return str(int(limit)) if float(limit).is_integer() else repr(limit)


def bounded(ge: float | None = None, *, le: float, gt: float | None = None, kind: type = float) -> Any:
    """A number type in [ge, le] (or (gt, le]): finite, and the limits shown in the schema."""
    low = f"> {_shown(gt)}" if gt is not None else f">= {_shown(ge)}"
    # The constraints come first: a validator listed after them wraps the constrained type.
    return Annotated[kind, Field(ge=ge, gt=gt, le=le), _finite(f"{low} and <= {_shown(le)}")]


Price = bounded(0, le=MAX_PRICE_PER_HOUR)
Amount = bounded(gt=0, le=MAX_AMOUNT)
QuotaAmount = bounded(0, le=MAX_QUOTA_AMOUNT)
PerfFactor = bounded(MIN_RELATIVE_PERFORMANCE, le=MAX_RELATIVE_PERFORMANCE)
Cores = bounded(gt=0, le=MAX_CPU_CORES)
MemoryGB = bounded(gt=0, le=MAX_MEMORY_GB)
DeviceMemoryGB = bounded(0, le=MAX_DEVICE_MEMORY_GB)
DeviceFigure = bounded(0, le=MAX_DEVICE_FIGURE)
IslandId = bounded(0, le=MAX_DEVICES_PER_NODE - 1, kind=int)


def format_limit_s(seconds: float) -> str:
    """366 days → "366d"; a limit that is not whole days in seconds."""
    days, rest = divmod(int(seconds), DAY_S)
    return f"{days}d" if days and not rest else f"{seconds:g}s"
