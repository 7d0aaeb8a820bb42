"""Capacity planning: replay a trace on today's inventory and on a changed one.

`change_inventory` adds or removes devices ("16x ascend-910b2"), `plan_capacity` runs the
trace through the simulator twice — the same `run_cycle` as the server — and compares the
two runs: waits, completion times, utilisation per pool and cost per team, plus
recommendations (saturated pools, idle pools, teams over quota). Pure: no web or DB.
"""

from __future__ import annotations

import difflib
import math
import re
from collections import defaultdict
from collections.abc import Callable

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.errors import SpecError
from hetpool.core.inventory import ClusterSpec, DeviceGroup, DeviceModelSpec, NodeSpec, PoolSpec
from hetpool.sim.engine import SimConfig, SimResult, Simulator
from hetpool.sim.report import summarize
from hetpool.sim.trace import TraceTask

_CHANGE_RE = re.compile(r"^\s*(\d+)\s*(?:x|\*|×)\s*(\S.*?)\s*$", re.IGNORECASE)
NEW_POOL_DEVICES_PER_NODE = 8


class CapacityReport(dict):
    """The JSON report (a plain dict) that also carries both runs' SimResults for plotting."""

    baseline_result: SimResult
    changed_result: SimResult


def parse_change(text: str, flag: str = "--add") -> tuple[int, str]:
    """'16x ascend-910b2', '16 x ascend-910b2' or '16*ascend-910b2' → (16, 'ascend-910b2')."""
    match = _CHANGE_RE.match(text or "")
    if not match or int(match.group(1)) < 1:
        raise SpecError(f"{flag} {text!r}: expected COUNTx MODEL with COUNT ≥ 1, e.g. '16x ascend-910b2'")
    return int(match.group(1)), match.group(2)


def resolve_model(name: str, models: dict[str, DeviceModelSpec], flag: str = "") -> str:
    """A catalog model id from an id, display name or alias ('Ascend 910B2' → ascend-910b2)."""
    if name in models:
        return name
    found = DeviceCatalog(models.values()).match_product(name)
    if found is not None:
        return found.name
    close = difflib.get_close_matches(name, list(models), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else " (see `hetpool get devicemodels`)"
    raise SpecError(f"{flag + ' ' if flag else ''}{name!r}: unknown device model{hint}")


def _devices_of(node: NodeSpec, model: str) -> int:
    return sum(g.count for g in node.devices if g.model == model)


def _unique_name(base: str, taken: set[str]) -> str:
    i = 1
    while f"{base}-{i}" in taken:
        i += 1
    taken.add(f"{base}-{i}")
    return f"{base}-{i}"


def _shape_for(model: str, nodes: dict[str, NodeSpec], pools: list[PoolSpec], models: dict[str, DeviceModelSpec]):
    """(pool to grow or None, template node or None, devices per node, stack, price, cluster)."""
    for pool in pools:
        if pool.model == model:
            for node_name in pool.nodes:
                node = nodes.get(node_name)
                if node is not None and _devices_of(node, model):
                    return pool, node, _devices_of(node, model), node.stack or pool.stack, pool.price_per_hour, pool.cluster
    # No pool of this model: borrow a node shape and stack from the same runtime family
    # (another CUDA GPU, another CANN NPU), else a bare 8-device node in the first cluster.
    runtime = models[model].runtime
    for pool in pools:
        if pool.model in models and models[pool.model].runtime == runtime:
            node = next((nodes[n] for n in pool.nodes if n in nodes), None)
            if node is not None:
                return None, node, NEW_POOL_DEVICES_PER_NODE, node.stack or pool.stack, pool.price_per_hour, pool.cluster
    cluster = pools[0].cluster if pools else next(iter(nodes.values())).cluster if nodes else None
    if cluster is None:
        raise SpecError(f"cannot add {model}: the inventory has no cluster to put it in")
    return None, None, NEW_POOL_DEVICES_PER_NODE, None, 0.0, cluster


def change_inventory(
    nodes: list[NodeSpec],
    pools: list[PoolSpec],
    models: dict[str, DeviceModelSpec],
    add: list[tuple[int, str]],
    remove: list[tuple[int, str]],
) -> tuple[list[NodeSpec], list[PoolSpec]]:
    """A copy of the inventory with devices added (cloned node shapes, appended to a pool
    of that model or to a new `plan-<model>` pool) and whole nodes removed (the last node
    of the largest pool of that model, the later pool on a tie, again and again) until at
    least the requested number of devices is gone."""
    node_by_name = {n.name: n for n in nodes}
    pool_list = list(pools)
    add = [(count, resolve_model(name, models, "--add")) for count, name in add]
    remove = [(count, resolve_model(name, models, "--remove")) for count, name in remove]
    shapes = {model: _shape_for(model, node_by_name, pool_list, models) for _, model in add}  # before removing

    for count, model in remove:
        held = [(p, n) for p in pool_list if p.model == model for n in p.nodes if n in node_by_name]
        available = sum(_devices_of(node_by_name[n], model) for _, n in held)
        if available < count:
            raise SpecError(f"--remove {count}x {model}: the inventory has only {available} {model} device(s) in pools")
        gone = 0
        while gone < count:
            candidates = [p for p in pool_list if p.model == model and p.nodes]
            sizes = {p.name: sum(_devices_of(node_by_name[n], model) for n in p.nodes if n in node_by_name) for p in candidates}
            pool = max(reversed(candidates), key=lambda p: sizes[p.name])  # on a tie, the later pool
            victim = next(n for n in reversed(pool.nodes) if n in node_by_name and _devices_of(node_by_name[n], model))
            gone += _devices_of(node_by_name.pop(victim), model)
            pool_list = [p.model_copy(update={"nodes": [n for n in p.nodes if n != victim]}) for p in pool_list]
            pool_list = [p for p in pool_list if p.nodes]  # a pool without nodes is gone

    taken = set(node_by_name) | {p.name for p in pool_list}
    for count, model in add:
        pool, template, per_node, stack, price, cluster = shapes[model]
        target = next((p for p in pool_list if pool is not None and p.name == pool.name), None)
        new_names = []
        for i in range(math.ceil(count / per_node)):
            n = min(per_node, count - i * per_node)
            islands = []
            if template is not None:
                group = next((g for g in template.devices if g.model == model), None)
                islands = list(group.islands[:n]) if group and len(group.islands) >= n else []
            name = _unique_name(f"{model}-plan", taken)
            fields = {"name": name, "cluster": cluster, "devices": [DeviceGroup(model=model, count=n, islands=islands)], "stack": stack}
            if template is not None:
                node = template.model_copy(update=fields)
            else:
                node = NodeSpec(**fields, cpu_cores=16 * per_node, memory_gb=128.0 * per_node)
            node_by_name[name] = node
            new_names.append(name)
        if target is not None:
            pool_list = [p.model_copy(update={"nodes": [*p.nodes, *new_names]}) if p.name == target.name else p for p in pool_list]
        else:
            name = f"plan-{model}" if f"plan-{model}" not in taken else _unique_name(f"plan-{model}", taken)
            taken.add(name)
            pool_list.append(PoolSpec(name=name, cluster=cluster, model=model, nodes=new_names, stack=stack, price_per_hour=price))
    return list(node_by_name.values()), pool_list


def device_counts(nodes: list[NodeSpec], pools: list[PoolSpec]) -> dict[str, int]:
    """Devices per model held by pools."""
    by_name = {n.name: n for n in nodes}
    counts: dict[str, int] = defaultdict(int)
    for pool in pools:
        for n in pool.nodes:
            if n in by_name:
                counts[pool.model] += _devices_of(by_name[n], pool.model)
    return dict(sorted(counts.items()))


def team_of(tenant: str) -> str:
    """Tenants are org/team/project: costs roll up to the team (the first two levels)."""
    return "/".join(tenant.split("/")[:2])


def _cost_per_team(summary: dict) -> dict[str, float]:
    costs: dict[str, float] = defaultdict(float)
    for tenant, group in summary["per_tenant"].items():
        costs[team_of(tenant)] += group["cost"]
    return {team: round(cost, 2) for team, cost in sorted(costs.items())}


def _pair(before, after) -> dict:
    delta = None if before is None or after is None else round(after - before, 4)
    return {"baseline": before, "changed": after, "delta": delta}


def _delta(base: dict, changed: dict) -> dict:
    pools = sorted(set(base["utilisation"]) | set(changed["utilisation"]))
    base_cost, changed_cost = _cost_per_team(base), _cost_per_team(changed)
    return {
        "avg_wait_hours": _pair(base["wait_hours"]["avg"], changed["wait_hours"]["avg"]),
        "p90_wait_hours": _pair(base["wait_hours"]["p90"], changed["wait_hours"]["p90"]),
        "avg_jct_hours": _pair(base["avg_jct_hours"], changed["avg_jct_hours"]),
        "makespan_hours": _pair(base["makespan_hours"], changed["makespan_hours"]),
        "never_started": _pair(base["never_started"], changed["never_started"]),
        "cost": _pair(base["cost"], changed["cost"]),
        "utilisation": {p: _pair(base["utilisation"].get(p), changed["utilisation"].get(p)) for p in pools},
        "cost_per_team": {t: _pair(base_cost.get(t, 0.0), changed_cost.get(t, 0.0)) for t in sorted(set(base_cost) | set(changed_cost))},
    }


def _demand_per_tenant(trace: list[TraceTask], result: SimResult) -> dict[str, float]:
    """Average devices each tenant asked for over the baseline's span: device-seconds it
    ran (or, never started, would have run on the reference device) / simulated seconds."""
    seconds: dict[str, float] = defaultdict(float)
    for task in trace:
        out = result.outcomes[task.id]
        if out.start_s is not None:
            seconds[task.spec.tenant] += out.devices * ((out.end_s if out.end_s is not None else result.end_s) - out.start_s)
        elif task.spec.per_worker.devices is not None:
            seconds[task.spec.tenant] += task.spec.workers * task.spec.per_worker.devices.count * task.reference_s
    span = max(result.end_s, 1e-9)
    return {tenant: s / span for tenant, s in seconds.items()}


def recommendations(
    trace: list[TraceTask],
    baseline: dict,
    changed: dict,
    baseline_result: SimResult,
    *,
    wait_target_h: float,
    idle_below: float,
    quotas: dict[str, float] | None,
) -> list[dict]:
    out = []
    for pool, group in baseline["per_pool"].items():
        p90 = group["wait_hours"]["p90"]
        if p90 is not None and p90 > wait_target_h:
            after = changed["per_pool"].get(pool, {}).get("wait_hours", {}).get("p90")
            model = baseline_result.pool_models.get(pool, "its")
            after_text = f"{after:g} h after the change" if after is not None else "no tasks there after the change"
            out.append(
                {
                    "kind": "saturated-pool",
                    "name": pool,
                    "detail": f"p90 wait {p90:g} h over the {wait_target_h:g} h target ({after_text}); add {model} devices",
                    "metric": p90,
                }
            )
    for pool, util in baseline["utilisation"].items():
        if baseline_result.pool_devices.get(pool) and util < idle_below:
            out.append(
                {
                    "kind": "idle-pool",
                    "name": pool,
                    "detail": f"{util:.0%} of {baseline_result.pool_devices[pool]} devices busy (below {idle_below:.0%}); shrink it or lend it out",
                    "metric": util,
                }
            )
    if quotas:
        demand = _demand_per_tenant(trace, baseline_result)
        for team, quota in sorted(quotas.items()):
            used = sum(d for tenant, d in demand.items() if tenant == team or tenant.startswith(team + "/"))
            if used > quota:
                out.append(
                    {
                        "kind": "team-over-quota",
                        "name": team,
                        "detail": f"demands {used:.1f} devices on average, quota {quota:g}",
                        "metric": round(used, 4),
                    }
                )
    return out


def plan_capacity(
    clusters: list[ClusterSpec],
    nodes: list[NodeSpec],
    pools: list[PoolSpec],
    models: dict[str, DeviceModelSpec],
    compat_check,
    trace: list[TraceTask],
    add: list[tuple[int, str]],
    remove: list[tuple[int, str]],
    *,
    wait_target_h: float = 1.0,
    idle_below: float = 0.3,
    quotas: dict[str, float] | None = None,
    progress: Callable[[str, float, int, int], None] | None = None,
    config: SimConfig | None = None,
) -> CapacityReport:
    """Baseline vs changed inventory on the same trace. `progress(run, now_s, arrived, total)`
    is called as each run advances ('baseline', then 'changed')."""
    new_nodes, new_pools = change_inventory(nodes, pools, models, add, remove)
    results = {}
    for label, (n, p) in {"baseline": (nodes, pools), "changed": (new_nodes, new_pools)}.items():
        sim = Simulator(clusters, n, p, models, compat_check, config or SimConfig())
        callback = (lambda now, arrived, total, label=label: progress(label, now, arrived, total)) if progress else None
        results[label] = sim.run(trace, progress=callback)
    base, changed = summarize(results["baseline"]), summarize(results["changed"])
    old_names, new_names = {x.name for x in nodes}, {x.name for x in new_nodes}
    report = CapacityReport(
        changes={
            "add": [f"{c}x {m}" for c, m in add],
            "remove": [f"{c}x {m}" for c, m in remove],
            "added_nodes": sorted(new_names - old_names),
            "removed_nodes": sorted(old_names - new_names),
            "devices": {"baseline": device_counts(nodes, pools), "changed": device_counts(new_nodes, new_pools)},
        },
        baseline=base,
        changed=changed,
        delta=_delta(base, changed),
        recommendations=recommendations(trace, base, changed, results["baseline"], wait_target_h=wait_target_h, idle_below=idle_below, quotas=quotas),
    )
    report.baseline_result, report.changed_result = results["baseline"], results["changed"]
    return report
