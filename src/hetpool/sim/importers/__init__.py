"""Importers: traces from elsewhere (Gavel's benchmark data, this control plane's own
task history) in hetpool's trace format (`hetpool.sim.trace`)."""

from hetpool.sim.importers.gavel import gavel_device_models, gavel_inventory, load_throughputs, read_gavel_trace
from hetpool.sim.importers.history import TaskRecord, history_from_records

__all__ = [
    "TaskRecord",
    "gavel_device_models",
    "gavel_inventory",
    "history_from_records",
    "load_throughputs",
    "read_gavel_trace",
]
