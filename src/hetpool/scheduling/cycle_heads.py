"""Which heads a cycle decides, in which order (cycle.py's phase 1, after the queue order is
built): the preemptors claiming what they freed, then a bounded scan of the queue order —
its front shared between the queues, the rest rotating — then the deferred borrowers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetpool.scheduling.cycle_state import Blame, CycleState
from hetpool.scheduling.explain import Reason
from hetpool.scheduling.queueing import QueueOrder

if TYPE_CHECKING:
    from hetpool.scheduling.cycle import Decision

__all__ = ["PREEMPTOR_CYCLES", "heads", "note_preemptors"]


# A preemptor is decided first for this many cycles after its last eviction (longer while
# it waits for its victims to release): long enough to claim what it freed.
PREEMPTOR_CYCLES = 3


def note_preemptors(preemptors: dict, decisions: list[Decision]) -> None:
    """Keep `snapshot.preemptors` (task id → cycles left) up to date with this cycle's decisions."""
    for d in decisions:
        if d.victims:
            preemptors[d.task_id] = PREEMPTOR_CYCLES
        elif d.task_id in preemptors:
            waiting = d.explanation.reason is Reason.WAITING_FOR_RELEASE
            left = PREEMPTOR_CYCLES if waiting else preemptors[d.task_id] - 1
            if d.admit or d.set_aside or left <= 0:
                del preemptors[d.task_id]
            else:
                preemptors[d.task_id] = left


def heads(st: CycleState, blame: Blame, budget: int = 0, cursor: list | None = None, preemptors: dict | None = None, skip=None):
    """Preemptors first, then heads in queue order, then the borrowers deferred behind them.

    A task that evicted work in a recent cycle is decided before anyone else (as the
    nominated pod of kube-scheduler is): otherwise a bounded scan may pass it over while
    its own victims, back in the queue, take the devices it freed — and the next cycle
    evicts them again.

    With a `budget` (policy.max_heads_per_cycle; 0: none), a cycle decides at most that
    many heads: the first half in queue order — the most deserving, every cycle — and the
    second half from where the previous cycle's scan stopped (`cursor`, as Slurm's
    bf_continue), so that every task deeper in the queue gets its turn within a few cycles
    however stuck the front is. Heads passed over carry to the next cycle without a new
    decision (they keep the explanation they had).

    The first half is shared between the queues (max-min, see `_FrontShare`): as Kueue
    tries the head of every ClusterQueue each cycle, one queue's stuck high-priority heads
    must not keep another queue's work that fits from its turn for dozens of cycles."""
    front = budget - budget // 2
    resume_at = cursor[0] if cursor else 0
    position = decided = 0
    for task_id in list(preemptors or ()):
        if (taken := st.order.take(task_id)) is None:
            del preemptors[task_id]  # admitted, gone, or behind its FIFO queue's head
            continue
        decided += 1
        yield taken
    share = _FrontShare(st.order, front - decided) if budget else None
    while not budget or decided < budget:
        blame.task_id = None  # choosing the next head is no one task's evaluation
        if (popped := st.order.pop()) is None:
            if share is not None and share.widen(front - decided):
                continue  # queues held at their share take what the others left of the front
            position = 0  # the whole queue was seen: the next scan starts over
            break
        position += 1
        if budget and decided >= front and position <= resume_at:
            st.carried += 1
            continue
        if skip is not None and skip(*popped):
            st.parked_over += 1  # parked: it keeps its explanation, and costs no budget
            continue
        decided += 1
        if share is not None:
            share.count(popped[0].name, front - decided)
        yield popped
    st.order.resume()
    if budget and cursor is not None:
        # Where the next scan resumes: admitted tasks leave the queue, moving every later one up.
        cursor[0] = max(0, position - sum(d.admit for d in st.decisions)) if position else 0
    st.deferring_done = True
    yield from st.borrowers


class _FrontShare:
    """Max-min shares of a bounded cycle's front between the queues (water-filling): each
    open queue may take `cap` heads, a queue at its cap is paused, and when every other
    queue has run dry the paused ones share what is left of the front. Parked heads passed
    over cost no share, as they cost no budget."""

    def __init__(self, order: QueueOrder, front: int) -> None:
        self.order, self.turns = order, {}
        self.cap = max(1, front // max(1, order.open_queues()))

    def count(self, queue_name: str, front_left: int) -> None:
        if front_left <= 0:
            self.order.resume()  # the front is spent: the rest of the budget in plain queue order
            return
        self.turns[queue_name] = self.turns.get(queue_name, 0) + 1
        if self.turns[queue_name] >= self.cap:
            self.order.pause(queue_name)

    def widen(self, front_left: int) -> bool:
        """Resume the paused queues with a higher cap; False: none was paused."""
        if not self.order.paused:
            return False
        self.cap += max(1, front_left // len(self.order.paused))
        self.order.resume()
        return True
