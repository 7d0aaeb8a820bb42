"""Every number a user can write has an upper bound (core/limits.py), and NaN and ±Infinity
are refused in every spec kind, by the API's JSON and by YAML files (`.inf`, `.nan`)."""

from __future__ import annotations

import math

import pytest

from hetpool.core import limits
from hetpool.core.errors import SpecError
from hetpool.core.specs import SPEC_KINDS, load_yaml_documents, parse_spec
from hetpool.core.units import parse_duration

INF, NAN = math.inf, math.nan


def _numbers_without_a_maximum(schema: dict, defs: dict, path: str, seen: set[str]) -> list[str]:
    """Paths of numeric leaves of a JSON schema that carry no maximum."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        if name in seen:
            return []
        return _numbers_without_a_maximum(defs[name], defs, path, seen | {name})
    found = []
    if schema.get("type") in ("number", "integer") and "maximum" not in schema and "exclusiveMaximum" not in schema:
        found.append(path)
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, []):
            found += _numbers_without_a_maximum(sub, defs, path, seen)
    for name, sub in schema.get("properties", {}).items():
        found += _numbers_without_a_maximum(sub, defs, f"{path}.{name}", seen)
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(schema.get(key), dict):
            found += _numbers_without_a_maximum(schema[key], defs, path + suffix, seen)
    return found


@pytest.mark.parametrize("kind", sorted(SPEC_KINDS))
def test_every_number_of_every_spec_kind_has_an_upper_bound(kind: str) -> None:
    schema = SPEC_KINDS[kind].model_json_schema()
    assert _numbers_without_a_maximum(schema, schema.get("$defs", {}), kind, set()) == []


def _task(**fields) -> dict:
    return {"kind": "Task", "name": "t", "tenant": "ai-lab", **fields}


def _with_devices(**device) -> dict:
    return _task(per_worker={"devices": {"class": "gpu", **device}})


# (document, the field the error must name, the limit the message must show)
REFUSED = [
    (_task(runtime_estimate="3000000d"), "runtime_estimate", "366d"),
    (_task(runtime_estimate="99999999999999999999d"), "runtime_estimate", "366d"),
    (_task(runtime_estimate="367d"), "runtime_estimate", "366d"),
    (_task(max_runtime="9" * 400), "max_runtime", "366d"),
    (_task(workers=10**6), "workers", "1024"),
    (_task(workers=10**30), "workers", "1024"),
    (_task(per_worker={"cpu": 1e9}), "per_worker.cpu", "4096"),
    (_task(per_worker={"memory_gb": INF}), "per_worker.memory_gb", "65536"),
    (_with_devices(count=10**6), "per_worker.devices.count", "64"),
    (_with_devices(min_memory_gb=1e300), "per_worker.devices.min_memory_gb", "4096"),
    (_task(relative_performance={"nvidia-t4": 1e-300}), "relative_performance.nvidia-t4", "0.001"),
    (_task(relative_performance={"nvidia-t4": NAN}), "relative_performance.nvidia-t4", "1000"),
    ({"kind": "Budget", "name": "b", "tenant": "ai-lab", "amount": INF}, "amount", "1000000000000"),
    ({"kind": "Budget", "name": "b", "tenant": "ai-lab", "amount": NAN}, "amount", "1000000000000"),
    ({"kind": "Budget", "name": "b", "tenant": "ai-lab", "amount": 1e13}, "amount", "1000000000000"),
    ({"kind": "Budget", "name": "b", "tenant": "ai-lab", "amount": 5, "alert_at": [NAN]}, "alert_at[0]", "10"),
    ({"kind": "Pool", "name": "p", "cluster": "c", "model": "m", "nodes": ["n"], "price_per_hour": INF}, "price_per_hour", "1000000"),
    ({"kind": "Pool", "name": "p", "cluster": "c", "model": "m", "nodes": ["n"], "price_per_hour": -INF}, "price_per_hour", "1000000"),
    ({"kind": "PriceList", "name": "l", "devices": [{"model": "m", "per_device_hour": INF}]}, "devices[0].per_device_hour", "1000000"),
    ({"kind": "PriceList", "name": "l", "per_cpu_core_hour": NAN}, "per_cpu_core_hour", "1000000"),
    ({"kind": "PriceList", "name": "l", "per_memory_gib_hour": 1e7}, "per_memory_gib_hour", "1000000"),
    ({"kind": "Quota", "name": "q", "tenant": "ai-lab", "limits": [{"resource": "gpu", "nominal": INF}]}, "limits[0].nominal", "1000000000"),
    (
        {"kind": "Quota", "name": "q", "tenant": "ai-lab", "limits": [{"resource": "gpu", "nominal": 1, "borrowing_limit": 1e10}]},
        "limits[0].borrowing_limit",
        "1000000000",
    ),
    ({"kind": "ApprovalPolicy", "name": "a", "max_devices": INF}, "max_devices", "65536"),
    ({"kind": "ApprovalPolicy", "name": "a", "expire_after": "400d"}, "expire_after", "366d"),
    ({"kind": "ReclaimPolicy", "name": "r", "idle_for": "99999999999999999999d"}, "idle_for", "366d"),
    ({"kind": "ReclaimPolicy", "name": "r", "notice": "1000d"}, "notice", "366d"),
    ({"kind": "Tenant", "name": "t", "weight": INF}, "weight", "1000"),
    ({"kind": "Queue", "name": "q", "order": 10**30}, "order", "1000000"),
    ({"kind": "Node", "name": "n", "cluster": "c", "cpu_cores": 10**9, "memory_gb": 1}, "cpu_cores", "4096"),
    (
        {"kind": "Node", "name": "n", "cluster": "c", "cpu_cores": 1, "memory_gb": 1, "devices": [{"model": "m", "count": 1, "islands": [10**12]}]},
        "devices[0].islands[0]",
        "1023",
    ),
    ({"kind": "DeviceModel", "name": "m", "vendor": "nvidia", "class": "gpu", "display_name": "M", "memory_gb": INF}, "memory_gb", "4096"),
    (
        {"kind": "DeviceModel", "name": "m", "vendor": "nvidia", "class": "gpu", "display_name": "M", "memory_gb": 8}
        | {"relative_performance": {"training": 1e-9}},
        "relative_performance.training",
        "0.001",
    ),
    ({"kind": "TaskTemplate", "name": "t", "type": "training", "defaults": {"runtime_estimate": "1000d"}}, "defaults.runtime_estimate", "366d"),
]


@pytest.mark.parametrize(("document", "field", "limit"), REFUSED, ids=[f"{d['kind']}.{f}" for d, f, _ in REFUSED])
def test_numbers_beyond_their_limit_and_non_finite_numbers_are_refused_naming_field_and_limit(document: dict, field: str, limit: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(document)
    named = [d for d in info.value.details if d["loc"].endswith(f": {field}")]
    assert named, info.value.details
    assert limit in named[0]["msg"], named[0]


ACCEPTED = [
    _task(runtime_estimate="366d", max_runtime="365d"),
    _task(workers=limits.MAX_WORKERS, per_worker={"cpu": limits.MAX_CPU_CORES, "memory_gb": limits.MAX_MEMORY_GB}),
    {"kind": "Budget", "name": "b", "tenant": "ai-lab", "amount": limits.MAX_AMOUNT},
    {"kind": "Pool", "name": "p", "cluster": "c", "model": "m", "nodes": ["n"], "price_per_hour": limits.MAX_PRICE_PER_HOUR},
    {"kind": "ApprovalPolicy", "name": "a", "expire_after": "366d", "max_devices": limits.MAX_DEVICES_PER_TASK},
]


@pytest.mark.parametrize("document", ACCEPTED, ids=[d["kind"] for d in ACCEPTED])
def test_numbers_at_their_limit_are_accepted(document: dict) -> None:
    parse_spec(document)


def test_a_yaml_file_with_inf_or_nan_is_refused_naming_the_file_the_field_and_the_limit() -> None:
    text = "kind: Budget\nname: b\ntenant: ai-lab\namount: .inf\n---\nkind: PriceList\nname: l\nper_cpu_core_hour: .nan\n"
    with pytest.raises(SpecError) as info:
        load_yaml_documents(text, "prices.yaml")
    message = info.value.message
    assert message.startswith("prices.yaml") and "amount" in message and "1000000000000" in message and "finite" in message, message
    assert any("per_cpu_core_hour" in d["loc"] for d in info.value.details), info.value.details


@pytest.mark.parametrize("value", ["99999999999999999999d", "3651d", "9" * 5000, INF, NAN, 10**400, 1e300])
def test_parse_duration_refuses_what_no_date_can_hold(value) -> None:
    with pytest.raises(ValueError, match="limit of 3650d"):
        parse_duration(value)


def test_the_limits_keep_the_worst_runtime_a_valid_date_from_now() -> None:
    # The longest runtime on the slowest device still lands well inside the calendar.
    from datetime import UTC, datetime, timedelta

    worst = limits.MAX_DURATION_S / limits.MIN_RELATIVE_PERFORMANCE
    assert datetime(2100, 1, 1, tzinfo=UTC) + timedelta(seconds=worst) < datetime(3200, 1, 1, tzinfo=UTC)
    # A budget's amount in micro-units fits a 64-bit integer column.
    assert limits.MAX_AMOUNT * 1_000_000 < 2**63
