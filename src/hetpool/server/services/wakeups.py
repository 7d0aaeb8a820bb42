"""Wake-ups between the worker pipelines: a pipeline that changed what another one works
on tells it, and that one runs its next round now instead of at the end of its interval.

Why: a task moves through four pipelines (schedule → dispatch → reconcile, and back to
schedule when it ends and frees its devices), each of which otherwise sleeps
`worker_interval_s` (0.5 s) between rounds. For short tasks those sleeps were most of a
task's time on the estate: 2,000 one-second tasks on the demo's 24 local GPUs took 268 s
to run, ~7 tasks/s (bench/crash_test.py --kills 0). A wake-up is only a hint: every
pipeline still runs at least once per interval, so a lost one (another replica's change,
a round that was already running) delays work by at most an interval, as before.

Who wakes whom: the scheduler wakes dispatch when it admitted work; dispatch wakes the
reconciler when it started jobs; the reconciler wakes the scheduler when a task ended or
gave its devices back. A woken pipeline still keeps a gap after its last round as long as
that round took (`WorkerPipelines`), so a stream of wake-ups cannot keep a thread busy more
than half of the time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from hetpool.server.services.context import ServiceContext
from hetpool.server.settings import PIPELINES


@dataclass
class Wakeups:
    events: dict[str, threading.Event] = field(default_factory=lambda: {name: threading.Event() for name in PIPELINES})
    sent: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PIPELINES, 0))  # for tests and metrics

    def wake(self, pipeline: str) -> None:
        self.sent[pipeline] += 1
        self.events[pipeline].set()

    def wait(self, pipeline: str, timeout_s: float) -> bool:
        """Sleep until woken or `timeout_s`; True when woken (the wake-up is consumed)."""
        event = self.events[pipeline]
        woken = event.wait(timeout_s)
        event.clear()
        return woken

    def wake_all(self) -> None:
        for event in self.events.values():
            event.set()


def wakeups(ctx: ServiceContext) -> Wakeups:
    return ctx.process_state("pipeline_wakeups", Wakeups)


def wake(ctx: ServiceContext, pipeline: str) -> None:
    wakeups(ctx).wake(pipeline)
