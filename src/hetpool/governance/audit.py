"""The audit hash chain: each event's hash covers its content and the previous hash.

Changing, inserting or deleting a stored event breaks the chain at that point, which
`verify_chain` reports as the first bad event.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

GENESIS_HASH = "0" * 64


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def event_hash(prev_hash: str, fields: dict[str, Any]) -> str:
    payload = prev_hash + "\n" + canonical_json(fields)
    return hashlib.sha256(payload.encode()).hexdigest()


@dataclass(frozen=True)
class ChainBreak:
    event_id: int
    problem: str


@dataclass(frozen=True)
class ChainHead:
    """The last event hetpool wrote, recorded apart from the events."""

    last_id: int
    hash: str


class Anchor(Protocol):
    """Checks beyond the chain itself (governance/audit_anchor.py: checkpoints under a key)."""

    def check(self, event_id: int, stored_hash: str) -> ChainBreak | None: ...

    def at_end(self, last_id: int | None) -> ChainBreak | None: ...


_RECENT = 1024


def _inserted_between(recent: deque[tuple[int, str]], prev_hash: str, event_id: int) -> ChainBreak | None:
    if not recent:
        return None
    if prev_hash == GENESIS_HASH:
        first, linked = recent[0][0], "the start of the trail"
    else:
        ids = [i for i, _ in recent]
        at = next((k for k, (_, h) in enumerate(recent) if h == prev_hash), None)
        if at is None or at == len(ids) - 1:
            return None
        first, linked = ids[at + 1], f"event {ids[at]}"
    last = recent[-1][0]
    span = f"event {first} was" if first == last else f"events {first}..{last} were"
    return ChainBreak(first, f"not written by hetpool: event {event_id} links to {linked}, so {span} inserted")


def verify_chain(
    events: Iterable[tuple[int, str, str, dict[str, Any]]],
    head: ChainHead | None = None,
    latest_head: Callable[[], ChainHead | None] | None = None,
    anchor: Anchor | None = None,
) -> ChainBreak | None:
    """Events as (id, prev_hash, hash, fields) in id order; None when the chain holds.

    With the head, read before the events, the end of the trail is checked too: an event
    past the head was not written by hetpool, and a head event that is gone means the
    trail was truncated. Events may be written while the trail is read, so an event past
    the head is checked again against `latest_head()`. The break named is the first bad
    event in id order. With an `anchor`, each good event and the end are checked against it too."""
    expected_prev, previous_id = GENESIS_HASH, None
    newest = head
    # Hashes of the latest events: an event linking back past its predecessor shows that
    # the events in between were inserted (rather than that one was deleted).
    recent: deque[tuple[int, str]] = deque(maxlen=_RECENT)
    for event_id, prev_hash, stored_hash, fields in events:
        if newest is not None and event_id > newest.last_id and latest_head is not None:
            newest = latest_head() or newest
        if newest is not None and event_id > newest.last_id:
            return ChainBreak(event_id, f"not written by hetpool: it follows event {newest.last_id}, the last one recorded (inserted)")
        if prev_hash != expected_prev:
            inserted = _inserted_between(recent, prev_hash, event_id)
            if inserted is not None:
                return inserted
            gap = ""
            if previous_id is not None and event_id > previous_id + 1:
                missing = f"{previous_id + 1}" if event_id == previous_id + 2 else f"{previous_id + 1}..{event_id - 1}"
                gap = f"; event(s) {missing} are missing"
            elif previous_id is None and event_id > 1:
                gap = f"; the events before {event_id} are missing"
            return ChainBreak(event_id, f"previous-hash link broken (an event before it was changed, inserted or deleted{gap})")
        if event_hash(prev_hash, fields) != stored_hash:
            return ChainBreak(event_id, "content does not match its hash (the event was modified)")
        if head is not None and event_id == head.last_id and stored_hash != head.hash:
            return ChainBreak(event_id, "hash differs from the one recorded when it was written (the event was modified)")
        anchored = anchor.check(event_id, stored_hash) if anchor is not None else None
        if anchored is not None:
            return anchored
        expected_prev, previous_id = stored_hash, event_id
        recent.append((event_id, stored_hash))
    if head is not None and (previous_id is None or previous_id < head.last_id):
        end = f"ends at event {previous_id}" if previous_id is not None else "is empty"
        return ChainBreak(head.last_id, f"missing: event {head.last_id} was the last one recorded, but the trail {end} (deleted)")
    return anchor.at_end(previous_id) if anchor is not None else None
