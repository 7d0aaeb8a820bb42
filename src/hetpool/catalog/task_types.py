"""Task type <-> device class rules: which task types a device model takes at all.

The rules are data (`data/task_types.yaml`): the task types each device class takes,
and the relative performance below which a model is too slow for a type. One function,
`task_type_verdict`, answers for a model and a task type; the scheduler's pool filter
and the pool profile both call it, so a plan never places work that `describe pool`
says the pool does not take, and vice versa.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import yaml

from hetpool.core.errors import SpecError
from hetpool.core.inventory import DeviceClass, DeviceModelSpec, TaskType

_SOURCE = "hetpool/catalog/data/task_types.yaml"


@dataclass(frozen=True)
class TaskTypeRules:
    takes: dict[DeviceClass, frozenset[TaskType]]
    min_useful_performance: float


@dataclass(frozen=True)
class TaskTypeVerdict:
    ok: bool
    relative_performance: float | None = None  # None when the class rules the type out
    why: str = ""


def parse_rules(data: object, source: str = _SOURCE) -> TaskTypeRules:
    """Rules from the YAML mapping; a class or task type the core does not know is an error."""
    if not isinstance(data, dict) or not isinstance(data.get("classes"), dict):
        raise SpecError(f"{source}: expected a mapping with 'classes'")
    takes: dict[DeviceClass, frozenset[TaskType]] = {}
    try:
        for name, types in data["classes"].items():
            takes[DeviceClass(name)] = frozenset(TaskType(t) for t in types or [])
        floor = float(data.get("min_useful_performance", 0.0))
    except (ValueError, TypeError) as exc:
        raise SpecError(f"{source}: {exc}") from None
    missing = set(DeviceClass) - set(takes)
    if missing:
        raise SpecError(f"{source}: no rule for device class(es) {', '.join(sorted(missing))}")
    return TaskTypeRules(takes=takes, min_useful_performance=floor)


@lru_cache(maxsize=1)
def builtin_rules() -> TaskTypeRules:
    """The packaged rules (parsed once per process)."""
    text = resources.files("hetpool.catalog").joinpath("data/task_types.yaml").read_text(encoding="utf-8")
    return parse_rules(yaml.safe_load(text))


def task_type_verdict(
    model: DeviceModelSpec, task_type: TaskType, performance: float | None = None, rules: TaskTypeRules | None = None
) -> TaskTypeVerdict:
    """Does `model` take `task_type` work? `performance` (a task's own figure for the
    model) replaces the catalog's relative performance when given."""
    rules = rules or builtin_rules()
    if task_type not in rules.takes.get(model.device_class, frozenset()):
        return TaskTypeVerdict(False, None, f"{model.device_class.value} devices do not take {task_type.value} work")
    perf = model.perf_for(task_type) if performance is None else performance
    if perf < rules.min_useful_performance:
        return TaskTypeVerdict(False, perf, f"relative performance {perf:g} is below {rules.min_useful_performance:g}")
    return TaskTypeVerdict(True, perf)
