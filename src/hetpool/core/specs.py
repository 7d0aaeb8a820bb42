"""Reading `kind:` documents: YAML text → typed specs, with errors that name the field.

Validation is all-or-nothing: `parse_documents` either returns every spec of the input
or raises one `SpecError` listing every problem, so nothing is half-applied.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from hetpool.core.compat_rule import CompatibilityRuleSpec
from hetpool.core.errors import SpecError
from hetpool.core.governance import ApprovalPolicySpec, BudgetSpec, PriceListSpec, ReclaimPolicySpec
from hetpool.core.inventory import ClusterSpec, DeviceModelSpec, NodeSpec, PoolSpec
from hetpool.core.policy import QueueSpec, SchedulingPolicySpec
from hetpool.core.quota import QuotaSpec
from hetpool.core.tasks import TaskSpec, TaskTemplateSpec
from hetpool.core.tenancy import TenantSpec

SPEC_KINDS: dict[str, type[BaseModel]] = {
    "DeviceModel": DeviceModelSpec,
    "CompatibilityRule": CompatibilityRuleSpec,
    "Cluster": ClusterSpec,
    "Node": NodeSpec,
    "Pool": PoolSpec,
    "Tenant": TenantSpec,
    "Quota": QuotaSpec,
    "ApprovalPolicy": ApprovalPolicySpec,
    "PriceList": PriceListSpec,
    "Budget": BudgetSpec,
    "ReclaimPolicy": ReclaimPolicySpec,
    "TaskTemplate": TaskTemplateSpec,
    "Queue": QueueSpec,
    "SchedulingPolicy": SchedulingPolicySpec,
    "Task": TaskSpec,
}
# Order in which `apply` writes kinds, so that references resolve within one batch.
APPLY_ORDER = [
    *("DeviceModel", "CompatibilityRule", "Tenant", "Cluster", "Node", "Pool"),
    *("Quota", "ApprovalPolicy", "PriceList", "Budget", "ReclaimPolicy"),
    *("TaskTemplate", "Queue", "SchedulingPolicy", "Task"),
]
# Lower-case and plural names accepted on the command line and in URLs.
KIND_ALIASES = {
    **{k.lower(): k for k in SPEC_KINDS},
    **{k.lower() + "s": k for k in SPEC_KINDS},
    "devicemodels": "DeviceModel",
    "compatibilityrules": "CompatibilityRule",
    "compatrules": "CompatibilityRule",
    "compatrule": "CompatibilityRule",
    "models": "DeviceModel",
    "model": "DeviceModel",
    "templates": "TaskTemplate",
    "approvalpolicies": "ApprovalPolicy",
    "pricelists": "PriceList",
    "prices": "PriceList",
    "reclaimpolicies": "ReclaimPolicy",
    "template": "TaskTemplate",
    "tasktemplates": "TaskTemplate",
    "policy": "SchedulingPolicy",
    "policies": "SchedulingPolicy",
    "schedulingpolicies": "SchedulingPolicy",
}

MAX_SPEC_BYTES = 4 * 1024 * 1024


def resolve_kind(name: str) -> str:
    kind = KIND_ALIASES.get(name.strip().lower().replace("-", "").replace("_", ""))
    if kind is None:
        allowed = ", ".join(SPEC_KINDS)
        raise SpecError(f"unknown kind {name!r}; allowed: {allowed}")
    return kind


def format_loc(loc: Iterable[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(root)"


def validation_details(exc: ValidationError, prefix: str = "") -> list[dict[str, str]]:
    details = []
    for err in exc.errors(include_url=False):
        loc = format_loc(err["loc"])
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        if loc == "(root)":
            loc = prefix.rstrip(": ") or loc  # an error about the whole document
        else:
            loc = f"{prefix}{loc}"
        details.append({"loc": loc, "msg": msg.removeprefix("Value error, ")})
    return details


def parse_spec(document: Any, where: str = "") -> BaseModel:
    """One mapping with a `kind:` → its typed spec, or a SpecError naming the field."""
    prefix = f"{where}: " if where else ""
    if not isinstance(document, dict):
        raise SpecError(f"{prefix}expected a mapping with 'kind:' and 'name:', got {type(document).__name__}")
    kind = document.get("kind")
    if not isinstance(kind, str) or kind not in SPEC_KINDS:  # a mapping or list is not hashable
        raise SpecError(
            f"{prefix}kind: {kind!r} is not a known kind",
            details=[{"loc": f"{prefix}kind", "msg": f"allowed: {', '.join(SPEC_KINDS)}"}],
        )
    try:
        return SPEC_KINDS[kind].model_validate(document)
    except ValidationError as exc:
        name = document.get("name", "?")
        details = validation_details(exc, prefix=f"{prefix}{kind}/{name}: ")
        first = details[0]
        raise SpecError(f"{first['loc']}: {first['msg']}", details=details) from None


# Hostile files: aliases are shared objects while loaded but are copied out when sent as
# JSON (9 levels of 9 aliases, "billion laughs", become 387 million items), and deep
# nesting overflows the stack. No real spec needs more of either.
MAX_YAML_ALIAS_NODES = 10_000  # values the aliases (*name) of one file stand for, once expanded
MAX_YAML_DEPTH = 50


def _expanded_size(node, memo: dict) -> int:
    found = memo.get(id(node))
    if found is None:
        if isinstance(node, yaml.SequenceNode):
            found = 1 + sum(_expanded_size(n, memo) for n in node.value)
        elif isinstance(node, yaml.MappingNode):
            found = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
        else:
            found = 1
        memo[id(node)] = found
    return found


class _GuardedLoader(yaml.SafeLoader):
    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._alias_nodes = 0
        self._sizes: dict = {}
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)
            self._alias_nodes += _expanded_size(node, self._sizes)
            if self._alias_nodes > MAX_YAML_ALIAS_NODES:
                raise SpecError(f"YAML aliases (*name) expand to more than {MAX_YAML_ALIAS_NODES} values; write the values out")
            return node
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise SpecError(f"nested deeper than {MAX_YAML_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml_documents(text: str, source: str = "<input>") -> list[dict]:
    if len(text.encode()) > MAX_SPEC_BYTES:
        raise SpecError(f"{source}: larger than {MAX_SPEC_BYTES // (1024 * 1024)} MiB")
    try:
        docs = [d for d in yaml.load_all(text, Loader=_GuardedLoader) if d is not None]  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        raise SpecError(f"{source}: not valid YAML: {exc}") from None
    except SpecError as exc:
        raise SpecError(f"{source}: {exc.message}") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise SpecError(f"{source}: a value cannot be read: {exc}") from None
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise SpecError(f"{source}: document {i + 1} is a {type(doc).__name__}, expected a mapping with 'kind:'")
    _refuse_non_finite(docs, source)
    return docs


def _non_finite_paths(value: Any, path: str = "") -> list[str]:
    if isinstance(value, float) and not math.isfinite(value):
        return [path or "(root)"]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _non_finite_paths(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _non_finite_paths(v, f"{path}[{i}]")]
    return []


def _refuse_non_finite(docs: list[dict], source: str) -> None:
    """YAML's .inf and .nan are numbers no spec accepts (core/limits.py). Refused while the
    file is read, naming the file and the field: a client could not even send them as JSON.
    The kind's own check supplies the message with the field's limit where it has one."""
    problems = []
    for i, doc in enumerate(docs):
        paths = _non_finite_paths(doc)
        if not paths:
            continue
        where = f"{source}#{i + 1}"
        try:
            parse_spec(doc, where)
            details = []
        except SpecError as exc:
            details = exc.details
        for path in paths:
            named = [d for d in details if d["loc"] == f"{where}: {path}" or d["loc"].endswith(f": {path}")]
            problems += named[:1] or [{"loc": f"{where}: {path}", "msg": "must be a finite number (NaN and ±Infinity are refused)"}]
    if problems:
        raise SpecError(f"{problems[0]['loc']}: {problems[0]['msg']}", details=problems)


def parse_documents(documents: list[tuple[str, dict]]) -> list[BaseModel]:
    """Validate every (source, document); raise one SpecError listing all problems."""
    specs: list[BaseModel] = []
    problems: list[dict[str, str]] = []
    for where, doc in documents:
        try:
            specs.append(parse_spec(doc, where))
        except SpecError as exc:
            problems.extend(exc.details or [{"loc": where, "msg": exc.message}])
    if problems:
        raise SpecError(
            f"{len(problems)} problem(s) in the input; nothing was applied: {problems[0]['loc']}: {problems[0]['msg']}",
            details=problems,
        )
    return specs


def spec_to_document(spec: BaseModel) -> dict:
    """The YAML/JSON form of a spec, with aliases (`class`, `type`) and no empty defaults."""
    return spec.model_dump(mode="json", by_alias=True, exclude_defaults=False)
