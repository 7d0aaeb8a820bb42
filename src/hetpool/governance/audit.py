"""The audit hash chain: each event's hash covers its content and the previous hash.

Changing, inserting or deleting a stored event breaks the chain at that point, which
`verify_chain` reports as the first bad event.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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


def verify_chain(events: Iterable[tuple[int, str, str, dict[str, Any]]]) -> ChainBreak | None:
    """Events as (id, prev_hash, hash, fields) in id order; None when the chain holds."""
    expected_prev = GENESIS_HASH
    for event_id, prev_hash, stored_hash, fields in events:
        if prev_hash != expected_prev:
            return ChainBreak(event_id, "previous-hash link broken (an event before it was changed, inserted or deleted)")
        if event_hash(prev_hash, fields) != stored_hash:
            return ChainBreak(event_id, "content does not match its hash (the event was modified)")
        expected_prev = stored_hash
    return None
