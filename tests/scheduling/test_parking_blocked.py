"""A head held back by another head's reservation is parked (scheduling/parking.py): nothing
changes its wait until that reservation ends or moves, so it is passed over meanwhile — on
the benchmark's 5,000-node estate ~1,900 such heads were re-decided every cycle — and let
go at its turn once the reservation is gone."""

from __future__ import annotations

from hetpool.core.policy import SchedulingPolicySpec
from hetpool.scheduling.cycle import run_cycle
from hetpool.scheduling.explain import Reason
from tests.scheduling.test_explanations import CHECK, T0, _by_id, _gang, _reservation_estate, _small


def test_a_head_blocked_by_a_reservation_waits_parked_until_the_reservation_is_gone() -> None:
    snap, running = _reservation_estate()
    policy = SchedulingPolicySpec(park_waiting=True)
    gang, small = _gang(), _small()  # the same queued tasks every cycle (a new spec is a change)
    first = _by_id(run_cycle(snap, [gang, small], CHECK, T0, running=running, policy=policy))
    assert first["small"].explanation.reason is Reason.BLOCKED_BY_RESERVATION
    assert "small" in snap.parking["state"].parked
    # Nothing changed: the gang still holds its reservation, the small task is passed over.
    again = run_cycle(snap, [gang, small], CHECK, T0, running=running, policy=policy)
    assert [d.task_id for d in again.decisions] == ["gang"] and again.parked == 1
    # The gang is withdrawn: its reservation is gone, and the small task starts at its turn.
    freed = _by_id(run_cycle(snap, [small], CHECK, T0, running=running, policy=policy))
    assert freed["small"].admit
