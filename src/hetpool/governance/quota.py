"""Quota accounting and admission (after Kueue's ClusterQueue / cohort model).

A task is charged to every quota that applies to it (its tenant or an ancestor, its
environment, its task type), for each limit its placement touches: devices of a model, of
a pool or of a class, A100-equivalents (devices × the model's relative performance for the
task type), CPU cores, memory. Admission needs, for every such limit:

    used + charge <= nominal                                  (within quota), or
    used + charge - nominal <= min(borrowing_limit, room)     (borrowing)

where `room` is what the quota's *cohort* — the quotas of its sibling tenants with the same
environment, type and resource — leaves idle and may lend (each sibling lends at most its
lending limit of its own idle nominal), less what the other members already borrow.
Because a child is charged to its parent's quota too, borrowing never takes a subtree past
its parent's nominal.

Work admitted over nominal is *borrowing*. When a lender's task is within its own nominal
but finds no free capacity, the borrowers of its cohort may be preempted for it whatever
their priority (Kueue's reclaimWithinCohort): `reclaimable_by`.

Pure: the server and the simulator build a QuotaBook from the applied quotas and the work
that holds capacity, and `run_cycle` asks it before admitting.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from hetpool.core.inventory import DeviceModelSpec
from hetpool.core.quota import CPU_CORES, DEVICE_CLASSES, MEMORY_GB, NORMALISED, QuotaLimit, QuotaSpec
from hetpool.core.tasks import TaskSpec
from hetpool.core.tenancy import tenant_parent
from hetpool.scheduling.quota_view import Held, QuotaCeiling
from hetpool.scheduling.running import RunningTask

EPS = 1e-9


@dataclass
class QuotaVerdict:
    ok: bool
    borrowing: bool = False
    reason: str = ""
    within_nominal: bool = True  # every applicable limit stays at or under its nominal


@dataclass
class _Charged:
    task_id: str
    tenant: str
    env: str
    task_type: str
    amounts: dict[tuple[str, str], float] = field(default_factory=dict)  # (quota, resource) -> amount
    borrowing: bool = False


class QuotaBook:
    def __init__(self, quotas: Iterable[QuotaSpec], models: dict[str, DeviceModelSpec], pool_models: dict[str, str]) -> None:
        self.quotas = {q.name: q for q in quotas}
        self.models = models
        self.pool_models = pool_models
        self.used: dict[tuple[str, str], float] = {}
        self.charged: dict[str, _Charged] = {}
        self._cohorts: dict[str, list[QuotaSpec]] = {}
        self._applicable: dict[tuple[str, str, str], list[QuotaSpec]] = {}
        self._fastest_of: dict[str, float] = {}
        self._cohort_keys: dict[tuple[str, str, str], frozenset[str]] = {}  # (tenant, env, type) → its quotas' cohorts (reclaimable_by)
        # (tenant, env, type, held) → charges: a book is charged with every running task each
        # pass, and tasks of one team and shape hold alike (13,000 running: 0.3 s → 0.1 s).
        self._amounts_memo: dict[tuple, dict[tuple[str, str], float]] = {}
        self._running_memo = _RunningCharges.for_book(self.quotas, models, pool_models)
        self._limits = {(q.name, limit.resource): limit for q in self.quotas.values() for limit in reversed(q.limits)}  # the first wins
        for q in self.quotas.values():
            key = self._cohort_key(q)
            self._cohorts.setdefault(key, []).append(q)

    def __bool__(self) -> bool:
        return bool(self.quotas)

    # ----------------------------------------------------------------- charging
    @staticmethod
    def _cohort_key(q: QuotaSpec) -> str:
        return f"{tenant_parent(q.tenant)}|{q.env}|{q.task_type}"

    def applicable(self, tenant: str, env: str, task_type: str) -> list[QuotaSpec]:
        # Asked for every check and charge; the quotas never change within a book.
        key = (tenant, env, task_type)
        if key not in self._applicable:
            self._applicable[key] = [q for q in self.quotas.values() if q.applies_to(tenant, env, task_type)]
        return self._applicable[key]

    def never_exceeds(self, spec: TaskSpec) -> bool:
        """True when no placement of `spec` could charge past any ceiling (nominal + the
        most it may borrow) — a bound from the request alone, so `ceiling` need not be
        asked placement by placement. False says nothing (ask `ceiling`)."""
        pw, workers = spec.per_worker, spec.workers
        devices = workers * max(pw.devices.count, 1.0) if pw.devices is not None else 0.0
        task_type = spec.task_type.value
        for q in self.applicable(spec.tenant, spec.env.value, task_type):
            for limit in q.limits:
                resource = limit.resource
                if resource == CPU_CORES:
                    most = workers * pw.cpu
                elif resource == MEMORY_GB:
                    most = workers * pw.memory_gb
                elif resource == NORMALISED:
                    most = devices * self._fastest(task_type)
                else:
                    most = devices
                if most > EPS and most > self._ceiling_of(q, limit) + EPS:
                    return False
        return True

    def _fastest(self, task_type: str) -> float:
        if task_type not in self._fastest_of:
            self._fastest_of[task_type] = max((m.perf_for(task_type) for m in self.models.values() if m.device_class.value != "cpu"), default=0.0)
        return self._fastest_of[task_type]

    def _ceiling_of(self, quota: QuotaSpec, limit: QuotaLimit) -> float:
        lendable = self._max_lendable(quota, limit.resource)
        return limit.nominal + (lendable if limit.borrowing_limit is None else min(limit.borrowing_limit, lendable))

    def amount(self, limit: QuotaLimit, task_type: str, held: Iterable[Held]) -> float:
        total = 0.0
        for h in held:
            model = self.models.get(h.model)
            resource = limit.resource
            if resource == CPU_CORES:
                total += h.cpu
            elif resource == MEMORY_GB:
                total += h.memory_gb
            elif model is None or model.device_class.value == "cpu":
                continue  # a CPU "device" is the node's sockets: only cpu-cores / memory-gb count it
            elif resource == NORMALISED:
                total += h.devices * model.perf_for(task_type)
            elif resource in DEVICE_CLASSES:
                total += h.devices if model.device_class.value == resource else 0.0
            elif resource == h.model or resource == h.pool:
                total += h.devices
        return total

    def _amounts(self, tenant: str, env: str, task_type: str, held: list[Held]) -> dict[tuple[str, str], float]:
        """Per (quota, resource): what `held` charges it. The result is shared: do not change it."""
        key = (tenant, env, task_type, tuple(held))
        found = self._amounts_memo.get(key)
        if found is None:
            if len(self._amounts_memo) > 100_000:
                self._amounts_memo.clear()  # a long-lived book: keep the memo bounded
            found = self._amounts_memo[key] = self._compute_amounts(tenant, env, task_type, held)
        return found

    def _compute_amounts(self, tenant: str, env: str, task_type: str, held: list[Held]) -> dict[tuple[str, str], float]:
        out = {}
        for q in self.applicable(tenant, env, task_type):
            for limit in q.limits:
                value = self.amount(limit, task_type, held)
                if value > EPS:
                    out[(q.name, limit.resource)] = value
        return out

    def _limit(self, quota: str, resource: str) -> QuotaLimit:
        # Asked for every key of every charge (a book charges all running work each pass).
        return self._limits[(quota, resource)]

    def _room(self, quota: QuotaSpec, resource: str, extra: dict[tuple[str, str], float]) -> float:
        """What the cohort can lend `quota` for `resource` now (see the module docstring)."""
        lendable, borrowed_by_others = 0.0, 0.0
        for member in self._cohorts.get(self._cohort_key(quota), []):
            if member.name == quota.name:
                continue
            limit = next((m for m in member.limits if m.resource == resource), None)
            if limit is None:
                continue
            used = self.used.get((member.name, resource), 0.0) + extra.get((member.name, resource), 0.0)
            idle = max(0.0, limit.nominal - used)
            lendable += idle if limit.lending_limit is None else min(idle, limit.lending_limit)
            borrowed_by_others += max(0.0, used - limit.nominal)
        return max(0.0, lendable - borrowed_by_others)

    def check(self, spec: TaskSpec, held: list[Held]) -> QuotaVerdict:
        """Could `spec` holding `held` be admitted now?"""
        amounts = self._amounts(spec.tenant, spec.env.value, spec.task_type.value, held)
        borrowing = False
        for (name, resource), amount in sorted(amounts.items()):
            limit = self._limit(name, resource)
            after = self.used.get((name, resource), 0.0) + amount
            if after <= limit.nominal + EPS:
                continue
            borrowing = True
            over = after - limit.nominal
            if limit.borrowing_limit is not None and over > limit.borrowing_limit + EPS:
                return QuotaVerdict(
                    False,
                    True,
                    f"quota {name}: {resource} would be {after:g} of {limit.nominal:g} (borrowing limit {limit.borrowing_limit:g})",
                    False,
                )
            room = self._room(self.quotas[name], resource, {})
            if over > room + EPS:
                return QuotaVerdict(
                    False,
                    True,
                    f"quota {name}: {resource} would be {after:g} of {limit.nominal:g}; siblings can lend {room:g}",
                    False,
                )
        return QuotaVerdict(True, borrowing, "", not borrowing)

    def state_key(self, spec: TaskSpec, pools: Iterable[tuple[str, str]]) -> tuple:
        """All that `check` (and `check` within `without`) reads for `spec` placed on some of
        `pools` ((pool, model) pairs), besides the placement and the released tasks' own
        charges: the configuration (the quotas, models and pool map, as the running-charges
        memo names them) and the usage, for the resources such a placement charges, of
        `spec`'s quotas and of their cohorts' members. Equal keys give equal verdicts
        (scheduling/plan_memo.py); a GPU admission leaves an NPU head's key alone."""
        memo = self._running_memo  # its config names quotas and models by id; its refs hold them (no id reused while a key lives)
        used, parts = self.used, [memo.config, memo.refs]
        where = tuple(pools)
        for q in self.applicable(spec.tenant, spec.env.value, spec.task_type.value):
            members = self._cohorts.get(self._cohort_key(q), [])
            for limit in q.limits:
                resource = limit.resource
                if not self._may_charge(resource, spec, where):
                    continue
                parts.append((q.name, resource, used.get((q.name, resource), 0.0), tuple(used.get((m.name, resource), 0.0) for m in members)))
        return tuple(parts)

    def _may_charge(self, resource: str, spec: TaskSpec, where: tuple[tuple[str, str], ...]) -> bool:
        """Could `spec` placed on some of `where` charge `resource`? (as `amount` counts)"""
        if resource in (CPU_CORES, MEMORY_GB):
            return True
        for pool, model_name in where:
            model = self.models.get(model_name)
            if model is None or model.device_class.value == "cpu":
                continue
            if resource == NORMALISED or resource == model_name or resource == pool:
                return True
            if resource in DEVICE_CLASSES and model.device_class.value == resource:
                return True
        return False

    def ceiling(self, spec: TaskSpec, held: Iterable[Held]) -> QuotaCeiling | None:
        """The first quota `spec` holding `held` could never be admitted under, whatever
        else runs: its charge is above nominal + the most it may borrow (its borrowing
        limit, and what its siblings could lend were they all idle). None: it could be."""
        amounts = self._amounts(spec.tenant, spec.env.value, spec.task_type.value, list(held))
        for (name, resource), amount in sorted(amounts.items()):
            limit = self._limit(name, resource)
            lendable = self._max_lendable(self.quotas[name], resource)
            borrowable = lendable if limit.borrowing_limit is None else min(limit.borrowing_limit, lendable)
            if amount > limit.nominal + borrowable + EPS:
                return QuotaCeiling(name, resource, amount, limit.nominal, limit.borrowing_limit, borrowable)
        return None

    def _max_lendable(self, quota: QuotaSpec, resource: str) -> float:
        """What `quota`'s siblings could lend it for `resource` were they all idle."""
        total = 0.0
        for member in self._cohorts.get(self._cohort_key(quota), []):
            limit = next((m for m in member.limits if m.resource == resource), None)
            if member.name == quota.name or limit is None:
                continue
            total += limit.nominal if limit.lending_limit is None else min(limit.nominal, limit.lending_limit)
        return total

    def charge(self, task_id: str, spec_or_facts, held: list[Held], *, exempt: bool = False) -> _Charged:
        """Record capacity held by a task (admitted now or running). Returns its record;
        `borrowing` is set when it takes any limit past nominal (or `exempt`: admitted over
        quota by approval)."""
        tenant, env, task_type = _facts(spec_or_facts)
        return self._charge_amounts(task_id, tenant, env, task_type, self._amounts(tenant, env, task_type, held), exempt)

    def _charge_amounts(self, task_id: str, tenant: str, env: str, task_type: str, amounts: dict, exempt: bool = False) -> _Charged:
        record = _Charged(task_id, tenant, env, task_type, amounts, borrowing=exempt)
        for key, amount in amounts.items():
            after = self.used.get(key, 0.0) + amount
            if after > self._limit(*key).nominal + EPS:
                record.borrowing = True
            self.used[key] = after
        self.charged[task_id] = record
        return record

    def charge_running(self, running: Iterable[RunningTask]) -> None:
        """Charge the work that holds capacity, in start order: whoever went past a nominal
        amount first is the one borrowing (and the first reclaimed). The live scheduler and
        the simulator both build their book this way, so they agree on who borrows.

        A fresh book charged with what the previous one was (same configuration) plus work
        that started after all of it starts from that book's charges and charges only the
        newcomers: the same charges in the same order, so the same sums and flags. Between
        two back-to-back passes nothing may have ended, and then the rest is the
        newcomers (~60 ms a pass at 5,000 nodes before). Anything ended or re-placed:
        charged from scratch."""
        memo = self._running_memo
        running = list(running)
        if not self.charged and not self.used and self._charge_newcomers(memo, running):
            return
        used: list[tuple] = []
        self._charge_in_order(memo, sorted(running, key=lambda r: (r.started_at, r.id)), used)
        memo.forget_all_but(used)
        memo.remember(self, running)

    def _charge_in_order(self, memo: _RunningCharges, ordered: list[RunningTask], used: list) -> None:
        """Charge `ordered` in that order, each placement's charges from the memo (its key appended to `used`)."""
        charge = self._charge_amounts
        for r in ordered:  # per running task, every pass: lean
            task_type = r.task_type.value
            key = (id(r.allocations), r.tenant, r.env, task_type)
            used.append(key)
            found = memo.amounts.get(key)
            if found is None or found[0] is not r.allocations:
                held = [
                    Held(a.pool, self.pool_models.get(a.pool, ""), len(a.device_indices) * a.device_fraction, a.cpu, a.memory_gb)
                    for a in r.allocations
                ]
                found = memo.keep(key, r.allocations, self._amounts(r.tenant, str(r.env), task_type, held))
            charge(r.id, r.tenant, str(r.env), task_type, found[1])

    def _charge_newcomers(self, memo: _RunningCharges, running: list[RunningTask]) -> bool:
        """Start from the last book's charges when `running` is its work, unchanged, plus
        work that sorts after all of it (see charge_running); False: it is not."""
        last = memo.last
        if last is None or len(running) < len(last.running):
            return False  # something ended (the steady state): not worth a look
        tasks, newcomers, latest = last.tasks(), [], None
        for r in running:  # per running task, every back-to-back pass: lean
            kept = tasks.get(r.id)
            if kept is None:
                latest = latest or last.latest()
                if (r.started_at, r.id) <= latest:
                    return False  # started before work already charged: the flags after it may change
                newcomers.append(r)
            elif kept is not r and not _charges_alike(kept, r):
                return False  # re-placed or changed: its place in the order and its charges may differ
        if len(running) - len(newcomers) != len(tasks):
            return False  # duplicate ids: charged from scratch as they come
        newcomers.sort(key=lambda r: (r.started_at, r.id))
        self.used, self.charged = dict(last.used), dict(last.charged)
        self._charge_in_order(memo, newcomers, [])
        if newcomers:  # the last book is now this one (its own task table: another thread may be reading the old one)
            tasks = {**tasks, **{r.id: r for r in newcomers}}
            memo.last = _LastBook(running, dict(self.used), dict(self.charged), tasks, (newcomers[-1].started_at, newcomers[-1].id))
        return True

    def release(self, task_id: str) -> None:
        record = self.charged.pop(task_id, None)
        if record is None:
            return
        for key, amount in record.amounts.items():
            self.used[key] = self.used.get(key, 0.0) - amount

    def is_borrowing(self, task_id: str) -> bool:
        record = self.charged.get(task_id)
        return bool(record and record.borrowing)

    def charged_tenant(self, task_id: str) -> str | None:
        """The tenant `task_id` is charged to (None: not charged)."""
        record = self.charged.get(task_id)
        return record.tenant if record else None

    def saved(self) -> tuple[dict, dict]:
        """The book's charges, for `restore` (a cycle re-run without a task starts from them)."""
        return dict(self.used), dict(self.charged)

    def restore(self, state: tuple[dict, dict]) -> None:
        self.used, self.charged = dict(state[0]), dict(state[1])

    @contextmanager
    def without(self, task_ids: Iterable[str]) -> Iterator[QuotaBook]:
        """The book as if `task_ids` had been released (what-if preemption); restored on exit."""
        state = self.saved()
        for task_id in task_ids:
            self.release(task_id)
        try:
            yield self
        finally:
            self.restore(state)

    def reclaimable_by(self, spec: TaskSpec, victim_id: str) -> bool:
        """May `spec` (a lender within its nominal) preempt `victim_id` to get its quota back?
        Yes when the victim is borrowing in a cohort where `spec` has a quota."""
        victim = self.charged.get(victim_id)
        if victim is None or not victim.borrowing:
            return False
        return self.may_reclaim(spec, victim.tenant, self._cohorts_of(victim))

    def _cohorts_of(self, record: _Charged) -> frozenset[str]:
        return frozenset(self._cohort_key(self.quotas[name]) for name, _ in record.amounts)

    def reclaim_groups(self, task_ids: Iterable[str]) -> dict[tuple[str, frozenset[str]], list[str]]:
        """The borrowing tasks among `task_ids`, grouped by all that `reclaimable_by` asks of
        them — their tenant and the cohorts they are charged in — so that a lender asks once
        per group (`may_reclaim`), not once per borrower."""
        groups: dict[tuple[str, frozenset[str]], list[str]] = {}
        for task_id in task_ids:
            record = self.charged.get(task_id)
            if record is not None and record.borrowing:
                groups.setdefault((record.tenant, self._cohorts_of(record)), []).append(task_id)
        return groups

    def may_reclaim(self, spec: TaskSpec, tenant: str, cohorts: frozenset[str]) -> bool:
        """May `spec` reclaim from a borrower of `tenant` charged in `cohorts`?"""
        if tenant == spec.tenant:
            return False
        # Asked for every borrower by each lender of a cycle: the cohorts are the book's constants.
        key = (spec.tenant, spec.env.value, spec.task_type.value)
        mine = self._cohort_keys.get(key)
        if mine is None:
            mine = self._cohort_keys[key] = frozenset(self._cohort_key(q) for q in self.applicable(*key))
        return not mine.isdisjoint(cohorts)

    def usage(self) -> list[dict]:
        """Per quota and resource: nominal, used, borrowed (over nominal), lent (own idle
        nominal that siblings use), headroom (what could still be admitted, borrowing
        included)."""
        out = []
        for q in sorted(self.quotas.values(), key=lambda q: q.name):
            for limit in q.limits:
                used = self.used.get((q.name, limit.resource), 0.0)
                borrowed = max(0.0, used - limit.nominal)
                room = self._room(q, limit.resource, {})
                # `room` is what the cohort lends in all; this quota already uses `borrowed` of it.
                more = max(0.0, room - borrowed)
                borrow_cap = more if limit.borrowing_limit is None else min(more, max(0.0, limit.borrowing_limit - borrowed))
                out.append(
                    {
                        "quota": q.name,
                        "tenant": q.tenant,
                        "env": q.env.value if q.env else None,
                        "type": q.task_type.value if q.task_type else None,
                        "resource": limit.resource,
                        "nominal": limit.nominal,
                        "borrowing_limit": limit.borrowing_limit,
                        "lending_limit": limit.lending_limit,
                        "used": round(used, 6),
                        "borrowed": round(borrowed, 6),
                        "lent": round(self._lent(q, limit), 6),
                        "headroom": round(max(0.0, limit.nominal - used) + borrow_cap, 6),
                    }
                )
        return out

    def _lent(self, quota: QuotaSpec, limit: QuotaLimit) -> float:
        """How much of this quota's idle nominal its cohort's borrowers are using (shared
        pro rata among the lenders)."""
        idle = max(0.0, limit.nominal - self.used.get((quota.name, limit.resource), 0.0))
        if idle <= EPS:
            return 0.0
        members = [m for m in self._cohorts.get(self._cohort_key(quota), []) if any(x.resource == limit.resource for x in m.limits)]
        borrowed = sum(max(0.0, self.used.get((m.name, limit.resource), 0.0) - self._limit(m.name, limit.resource).nominal) for m in members)
        idles = []
        for m in members:
            ml = self._limit(m.name, limit.resource)
            i = max(0.0, ml.nominal - self.used.get((m.name, limit.resource), 0.0))
            idles.append(i if ml.lending_limit is None else min(i, ml.lending_limit))
        total_idle = sum(idles)
        share = idle if limit.lending_limit is None else min(idle, limit.lending_limit)
        return 0.0 if total_idle <= EPS else min(share, borrowed * share / total_idle)


class _RunningCharges:
    """What each running task charges, kept across books.

    The server and the simulator build a fresh book every pass and charge it with all the
    running work (13,000 tasks at 5,000 nodes), though a task's charges change only with
    its placement or the quota configuration. Kept per placement — the allocations tuple,
    by identity (the server's active-work cache and the simulator keep one per attempt;
    held here, so its id is never reused while kept) — for one configuration: the quotas,
    the device models and the pool → model map a book was built from (the first two by
    identity, as the server keeps its inventory between passes). A book of another
    configuration starts a new memo. Charging order and borrowing flags are the book's,
    computed per pass as before: only the amounts are kept."""

    MAX_ENTRIES = 200_000
    _current: _RunningCharges | None = None

    def __init__(self, config: tuple, refs: tuple) -> None:
        self.config, self.refs = config, refs  # refs: the objects whose ids the config holds
        self.amounts: dict[tuple, tuple] = {}
        self.last: _LastBook | None = None  # what the last book was charged with (QuotaBook._charge_newcomers)

    def remember(self, book: QuotaBook, running: list[RunningTask]) -> None:
        """The charges of a book just charged with `running` (a book charged with nothing,
        a what-if, leaves the last one alone)."""
        if running:
            self.last = _LastBook(running, dict(book.used), dict(book.charged))

    @classmethod
    def for_book(cls, quotas: dict, models: dict, pool_models: dict) -> _RunningCharges:
        config = (
            tuple((name, id(q)) for name, q in quotas.items()),
            tuple((name, id(m)) for name, m in models.items()),
            tuple(sorted(pool_models.items())),
        )
        memo = cls._current
        if memo is None or memo.config != config:
            # Swapped, never changed in place: a book built before keeps the memo it has.
            memo = cls._current = cls(config, (list(quotas.values()), list(models.values())))
        return memo

    def forget_all_but(self, used: list[tuple]) -> None:
        """Drop the placements of work no longer running once they are most of the memo
        (a long-lived server would otherwise hold every finished attempt's allocations up
        to MAX_ENTRIES). A book charged with nothing (a what-if) leaves the memo alone."""
        if used and len(self.amounts) > 2 * len(used) + 1024:
            self.amounts = {key: self.amounts[key] for key in used if key in self.amounts}

    def keep(self, key: tuple, allocations: tuple, amounts: dict) -> tuple:
        if len(self.amounts) > self.MAX_ENTRIES:
            self.amounts = {}  # bounded: placements long gone are forgotten with the rest
        found = self.amounts[key] = (allocations, amounts)
        return found


@dataclass
class _LastBook:
    """A book's charges right after charge_running, and what it was charged with (its
    task table and latest start worked out when first asked: in the steady state, where
    work ends between passes, they never are)."""

    running: list[RunningTask]
    used: dict[tuple[str, str], float]
    charged: dict[str, _Charged]  # the records are never changed once made: shared between books
    _tasks: dict[str, RunningTask] | None = None  # by id
    _latest: tuple | None = None  # the last (started at, id) in charging order

    def tasks(self) -> dict[str, RunningTask]:
        if self._tasks is None:
            self._tasks = {r.id: r for r in self.running}
        return self._tasks

    def latest(self) -> tuple:
        if self._latest is None:
            self._latest = max((r.started_at, r.id) for r in self.running)
        return self._latest


def _charges_alike(a: RunningTask, b: RunningTask) -> bool:
    """Are two records of a running task charged alike, in the same place of the order?"""
    same = a.tenant == b.tenant and a.env == b.env and a.task_type == b.task_type and a.started_at == b.started_at
    return same and (a.allocations is b.allocations or a.allocations == b.allocations)


def _facts(spec_or_facts) -> tuple[str, str, str]:
    if isinstance(spec_or_facts, TaskSpec):
        return spec_or_facts.tenant, spec_or_facts.env.value, spec_or_facts.task_type.value
    tenant, env, task_type = spec_or_facts
    return tenant, str(env), str(task_type)
