"""Interpreter settings for a server process (`hetpool up`): the garbage collector and the
thread switch interval. The API threads, the submit batcher and the worker pipelines share
one interpreter lock, so what the interpreter does between them is everyone's latency.

Garbage collector. A server keeps tens of thousands of long-lived objects per thousand
queued tasks (the queue cache, the resolved specs, the snapshots), and CPython's default
collector (threshold 700) runs a young collection every 700 net allocations and, as those
long-lived objects accumulate, a full collection that walks all of them. Measured on a
scheduler pass over 6,000 queued tasks (2 cores): ~95 collections per pass and a full one
every other pass of ~180 ms, during which no other thread runs — a pass of 360 ms instead
of 165 ms. With the young threshold at 50,000 the same passes run no full collection and
take 160–175 ms. `gc.freeze()` after start-up moves what start-up made (modules, the
catalogs, the compatibility KB) out of every later collection. Reference cycles are still
collected, only less often (at most ~50,000 young objects wait).

Switch interval. A thread that computes (a scheduling pass, a big overview) keeps the lock
for the switch interval before another thread may take it: CPython's 5 ms makes every
request that arrives during a 170 ms pass wait in line many times. At 1 ms, measured with
bench/api_load.py (1 replica with its pipelines, durable PostgreSQL): submit p99 226 → 126
ms at the same throughput (334 → 339 submissions/s).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 50_000
OLDER_THRESHOLDS = (20, 100)
SWITCH_INTERVAL_S = 0.001


def tune_gc() -> None:
    """The collector settings above, for the rest of the process."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)


@contextmanager
def tuned_gc() -> Iterator[None]:
    """The same settings for one long batch run in a process that goes on afterwards
    (`hetpool sim run`, which holds every task of a trace; the benchmarks): on leaving, the
    frozen objects are collectable again and the thresholds are what they were."""
    before = gc.get_threshold()
    tune_gc()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


@contextmanager
def collections_deferred() -> Iterator[None]:
    """No automatic collection inside the block; at most one young collection when it ends.

    A scheduling cycle allocates millions of short-lived objects (rows, candidate
    placements, explanations) and frees nearly all of them by reference counting. Each
    automatic young collection in it walks 50,000 objects that are about to die anyway:
    measured on busy steady cycles at 2,000 nodes, 11 young collections per 10 cycles, ~55
    ms a cycle. Deferred, one collection at the end — when the block's allocations call for
    one — walks only what survived, inside the cycle's own time (the benchmarks report
    it). Nothing is lost: a reference cycle made in the block is collected by that
    collection or a later one.

    Process-wide (the collector has no per-thread switch): an API thread allocating
    during the block is not collected either, for the length of one cycle. Nesting and
    concurrent use are safe: only the block that found the collector on turns it back on,
    and a process that turned it off itself keeps it off."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
            # The one young collection the block's allocations call for, if they do (what
            # the collector would do at the next allocation): collecting after every cycle
            # regardless cost the simulator's 3,333 small cycles of 100,000 tasks ~25 s.
            if gc.get_count()[0] >= gc.get_threshold()[0]:
                gc.collect(0)


def tune_for_server() -> None:
    tune_gc()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
