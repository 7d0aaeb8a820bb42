"""The audit hash chain (pure): each kind of tampering names the first bad event."""

from __future__ import annotations

from hetpool.governance.audit import GENESIS_HASH, ChainHead, event_hash, verify_chain


def chain(n: int) -> list[tuple[int, str, str, dict]]:
    events, prev = [], GENESIS_HASH
    for i in range(1, n + 1):
        fields = {"actor": "alice", "action": "x.change", "n": i}
        h = event_hash(prev, fields)
        events.append((i, prev, h, fields))
        prev = h
    return events


def head_of(events) -> ChainHead:
    return ChainHead(events[-1][0], events[-1][2])


def test_intact_chain_holds() -> None:
    events = chain(5)
    assert verify_chain(events) is None and verify_chain(events, head_of(events)) is None
    assert verify_chain([], None) is None


def test_modified_content_or_hash_is_named() -> None:
    events = chain(5)
    i, prev, h, fields = events[2]
    broken = verify_chain([*events[:2], (i, prev, h, {**fields, "actor": "mallory"}), *events[3:]], head_of(events))
    assert broken.event_id == 3 and "modified" in broken.problem
    # Rewriting an event with its hash recomputed breaks the next link instead.
    forged = event_hash(prev, {**fields, "actor": "mallory"})
    broken = verify_chain([*events[:2], (i, prev, forged, {**fields, "actor": "mallory"}), *events[3:]], head_of(events))
    assert broken.event_id == 4 and "link broken" in broken.problem
    # ... and of the last event, the head tells.
    last_i, last_prev, _, last_fields = events[-1]
    redo = (last_i, last_prev, event_hash(last_prev, {**last_fields, "n": 0}), {**last_fields, "n": 0})
    broken = verify_chain([*events[:-1], redo], head_of(events))
    assert broken.event_id == 5 and "modified" in broken.problem


def test_deleted_events_are_found_in_the_middle_at_the_start_and_at_the_end() -> None:
    events = chain(6)
    head = head_of(events)
    middle = verify_chain([*events[:2], *events[4:]], head)
    assert middle.event_id == 5 and "event(s) 3..4 are missing" in middle.problem
    first = verify_chain(events[1:], head)
    assert first.event_id == 2 and "before 2 are missing" in first.problem
    tail = verify_chain(events[:4], head)
    assert tail.event_id == 6 and "ends at event 4" in tail.problem
    assert verify_chain(events[:4]) is None  # without the head a truncation goes unseen
    assert verify_chain([], head).event_id == 6


def test_inserted_events_are_named() -> None:
    events = chain(4)
    head = head_of(events)
    fields = {"actor": "mallory", "action": "x.change", "n": 99}
    appended = (5, events[-1][2], event_hash(events[-1][2], fields), fields)  # a perfectly linked extra event
    broken = verify_chain([*events, appended], head)
    assert broken.event_id == 5 and "inserted" in broken.problem
    # Written by hetpool meanwhile (the head moved on while the trail was read): fine.
    assert verify_chain([*events, appended], head, lambda: ChainHead(5, appended[2])) is None
    # Well-formed events wedged in: the next real event links past them, which names them.
    wedged = (0, GENESIS_HASH, event_hash(GENESIS_HASH, fields), fields)
    broken = verify_chain([wedged, *events], head)
    assert broken.event_id == 0 and "event 1 links to the start of the trail, so event 0 was inserted" in broken.problem
    a = (3, events[1][2], event_hash(events[1][2], fields), fields)
    b = (4, a[2], event_hash(a[2], {**fields, "n": 100}), {**fields, "n": 100})
    moved = [(i + 2, p, h, f) for i, p, h, f in events[2:]]  # the real 3 and 4 now sit at 5 and 6
    broken = verify_chain([*events[:2], a, b, *moved], ChainHead(6, events[-1][2]))
    assert broken.event_id == 3 and "event 5 links to event 2, so events 3..4 were inserted" in broken.problem
