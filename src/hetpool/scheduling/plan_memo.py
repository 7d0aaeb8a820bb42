"""Preemption plans that came to nothing, remembered until something they read changes.

On a busy estate with quotas the same heads plan a preemption cycle after cycle, and each
plan ends the same way: the quota book refuses it ("it would have to borrow, and 3 task(s)
of other tenants run within their own quota"), or no set of victims lets the head fit. At
2,000 nodes, back-to-back cycles planned ~30 such plans each — a fifth to a quarter of a
cycle — for the same heads, tens of cycles running (bench/scheduler_throughput.py,
steady_busy).

A plan is a pure function of what it reads (cycle_preempt.plan_preemption → find_victims,
quota_blocks_plan). This memo keeps, per head, a **fingerprint** of all of it with the
outcome; a later cycle that computes an equal fingerprint at the head's turn reuses the
outcome without planning. The reuse still costs the head its preemption try, as the plan
did, so every later head of the cycle sees the same budget: decisions do not change
(tests/sim/test_plan_memo.py drives twin estates, memo on and off, and compares every
decision, reason and fact). Only outcomes without side effects are kept: a plan that names
victims evicts them and is never reused.

What the fingerprint holds — what a plan reads:

- the head: its spec (the same object or an equal one), its placement constraints, the policy;
- the capacity of the pools it could use as this cycle left it at the head's turn: device
  shares of their rows, and the CPU, memory and health of their nodes (a digest of the
  arrays; `assign` reads no other row, and a victim's release elsewhere changes nothing it
  reads);
- the running work it could evict there — every task the plan's first search considers,
  in order, with its priority, start, placement, preemptibility, tenant and quota standing
  (charged tenant, borrowing, reclaimable by the head, being evicted this cycle); the
  retries search subsets of it;
- the quota book's state for the head (QuotaBook.state_key): its configuration and the
  usage of the head's quotas and of their cohorts' members.

Whether the head gets to plan at all (a try left, not hopeless, something below it) is
decided before the memo is asked, as before.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from hetpool.scheduling.cycle_parked import candidate_pools
from hetpool.scheduling.cycle_state import Candidate, CycleInputs, CycleState, idle_key
from hetpool.scheduling.preempt import _usable_node_mask
from hetpool.scheduling.snapshot import Snapshot
from hetpool.scheduling.victim_arrays import RunningArrays, cycle_arrays

MEMO_KEY = "fruitless_plans"  # where the memo lives in Snapshot.parking (kept across cycles with the snapshot)
MAX_ENTRIES = 20_000  # heads remembered at most; past it the memo starts afresh
ENABLED = True  # tests switch it off to compare decisions with and without it


@dataclass
class FruitlessPlans:
    """Per head: (fingerprint, outcome) of its last plan that came to nothing."""

    entries: dict[str, tuple[tuple, object]] = field(default_factory=dict)
    rows_of: dict[frozenset[int], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # pools → their rows, their nodes
    hits: int = 0
    misses: int = 0

    def lookup(self, task_id: str, fingerprint: tuple):
        """The outcome kept for `task_id` under an equal fingerprint, or None."""
        found = self.entries.get(task_id)
        if found is not None and found[0] == fingerprint:
            self.hits += 1
            return found[1]
        self.misses += 1
        return None

    def keep(self, task_id: str, fingerprint: tuple, outcome) -> None:
        if len(self.entries) >= MAX_ENTRIES and task_id not in self.entries:
            self.entries.clear()  # bounded: heads long admitted or gone are forgotten with the rest
        self.entries[task_id] = (fingerprint, outcome)

    def forget(self, task_id: str) -> None:
        self.entries.pop(task_id, None)


def memo_of(snapshot: Snapshot) -> FruitlessPlans | None:
    """The snapshot's memo (None: switched off)."""
    if not ENABLED:
        return None
    return snapshot.parking.setdefault(MEMO_KEY, FruitlessPlans())


def fingerprint(cx: CycleInputs, st: CycleState, cand: Candidate, reclaim: frozenset[str], memo: FruitlessPlans) -> tuple | None:
    """Everything the head's plan would read at this point of the cycle (see the module
    doc), or None when the quota book cannot say what it reads (no reuse then)."""
    pools = candidate_pools(cx, st, cand)
    quota_state = ()
    if cx.quota:
        state_key = getattr(cx.quota, "state_key", None)
        if state_key is None:
            return None
        quota_state = state_key(cand.spec, ((cx.snapshot.pools[p].name, cx.snapshot.pools[p].model.name) for p in sorted(pools)))
    if st.policy_key is None:
        st.policy_key = repr(cx.policy)  # once per cycle
    head = (cand.spec, cand.item.quota_exempt, cand.kwargs["allowed_pools"], repr(cand.kwargs["placement"]), st.policy_key)
    return (head, _capacity(st, pools, memo), _evictable(cx, st, cand, reclaim), quota_state)


def _capacity(st: CycleState, pools: frozenset[int], memo: FruitlessPlans) -> bytes:
    """A digest of the working capacity on `pools`' rows and their nodes, once per pool set
    and capacity version in a cycle (take() bumps the version of every pool of a node)."""
    working = st.working
    ordered = sorted(pools)
    key = (pools, working.capacity_version(ordered))
    digest = st.capacity_digests.get(key)
    if digest is None:
        where = memo.rows_of.get(pools)
        if where is None:
            rows = np.concatenate([np.asarray(working.pools[p].rows, dtype=np.int64) for p in ordered]) if ordered else np.zeros(0, dtype=np.int64)
            where = memo.rows_of[pools] = (rows, np.unique(working.row_node[rows]))
        rows, nodes = where
        digest = st.capacity_digests[key] = _digest(
            working.dev_free.data[rows], working.free_cpu[nodes], working.free_mem[nodes], working.node_healthy[nodes]
        )
    return digest


def _evictable(cx: CycleInputs, st: CycleState, cand: Candidate, reclaim: frozenset[str]) -> bytes:
    """A digest of the running work the plan's first search considers (find_victims'
    candidates before the caller's filter, which reads only what is listed here), in
    running order: each task's signature (`_signatures`), and whether it is reclaimable by
    the head or being evicted this cycle."""
    if st.running_arrays is None:
        st.running_arrays = cycle_arrays(cx.snapshot, cx.running)  # once per cycle, as the plan builds it
    arrays: RunningArrays = st.running_arrays
    key = idle_key(cand, "usable nodes")  # depends on the spec and the inventory alone: kept across cycles
    usable = st.idle_results.get(key)
    if usable is None:
        usable = st.idle_results[key] = _usable_node_mask(cx.snapshot, cand.spec, cx.compat_check, cand.kwargs["allowed_pools"])
    # Heads of one shape, rank and tenant read the same work: once per cycle while nothing
    # was evicted since (the evicted set only grows in a cycle: its size is its version).
    rank = cand.spec.priority.rank
    memo_key = (key, rank, id(reclaim), len(reclaim), len(st.evicting))
    found = st.evictable_digests.get(memo_key)
    if found is not None and found[0] is reclaim:
        return found[1]
    positions = arrays.candidates(usable, rank, reclaim)
    signatures = _signatures(cx, st, arrays, positions)
    digest = _digest(signatures[positions], _mask(st, arrays, reclaim)[positions], _mask(st, arrays, st.evicting)[positions])
    st.evictable_digests[memo_key] = (reclaim, digest)  # holds the set: its id is not reused within the cycle
    return digest


def _mask(st: CycleState, arrays: RunningArrays, ids: set[str] | frozenset[str]) -> np.ndarray:
    """Per running task: is it in `ids`? Once per set in a cycle — a tenant's reclaimable
    work is one set object for the cycle (cycle_preempt._reclaimable_ids), thousands of ids
    on a busy estate; the evicted set only grows within a cycle, so its size is its version."""
    key = (id(ids), len(ids))
    found = st.id_masks.get(key)
    if found is None or found[0] is not ids:
        mask = np.zeros(len(arrays.tasks), dtype=bool)
        mask[[i for i in map(arrays.position.get, ids) if i is not None]] = True
        found = st.id_masks[key] = (ids, mask)  # holds the set: its id is not reused within the cycle
    return found[1]


def _signatures(cx: CycleInputs, st: CycleState, arrays: RunningArrays, positions: np.ndarray) -> np.ndarray:
    """Per running task (computed for `positions` on first need, once per cycle): a 64-bit
    hash of all the plan reads of it — id, start, priority, tenant, environment, type,
    placement, preemptibility, and its quota standing (charged tenant, borrowing)."""
    if st.signatures is None:
        st.signatures = (np.zeros(len(arrays.tasks), dtype=np.int64), np.zeros(len(arrays.tasks), dtype=bool))
    signatures, known = st.signatures
    missing = positions[~known[positions]]
    if len(missing):
        quota = cx.quota
        for i in missing.tolist():
            r = arrays.tasks[i]
            standing = (quota.charged_tenant(r.id), quota.is_borrowing(r.id)) if quota else None
            facts = (r.id, r.started_at, r.priority_rank, r.tenant, r.env, r.task_type, r.allocations, r.preemptible, r.being_preempted, standing)
            try:
                signatures[i] = hash(facts)
            except TypeError:  # a placement built with lists rather than tuples
                signatures[i] = hash(repr(facts))
        known[missing] = True
    return signatures


def _digest(*parts: np.ndarray) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(np.ascontiguousarray(part).tobytes())
        h.update(b"|")
    return h.digest()
