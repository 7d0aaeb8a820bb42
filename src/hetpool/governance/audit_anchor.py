"""Checkpoints of the audit chain under a key kept outside the database (pure).

The hash chain and the head row (governance/audit.py) catch a change made by hand, but
whoever can write the database can also recompute every later hash and move the head:
the chain then holds again. A checkpoint records the head — event id, hash, how many
events up to it, when — with an HMAC-SHA256 under a key the database does not hold, and
is kept outside the database (a file, the log). Without the key nobody can make a
checkpoint that verifies, and a chain that no longer contains a checkpointed (id, hash)
was rewritten or truncated, however consistent it looks.

Checkpoints are chained too: each carries the MAC of the one before it and a sequence
number, so deleting a line from the middle or the start of a checkpoint file is seen.
Deleting the *last* lines of the file is not seen from the file alone; the copies in the
log are for that.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from hetpool.governance.audit import ChainBreak, canonical_json

GENESIS_CHECKPOINT = "0" * 64
VERSION = 1
LOG_MARKER = "audit checkpoint "  # how a checkpoint is written to (and found in) a log line
_FIELDS = {"v": int, "seq": int, "ts": str, "event_id": int, "event_hash": str, "events": int, "prev": str, "key_id": str, "mac": str}


def key_id(key: bytes) -> str:
    """A short name of the key that reveals nothing of it: tells 'another key' from 'altered'."""
    return hmac.new(key, b"hetpool audit key id", hashlib.sha256).hexdigest()[:16]


def _mac(key: bytes, body: dict[str, Any]) -> str:
    return hmac.new(key, canonical_json(body).encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Checkpoint:
    seq: int
    ts: str  # ISO UTC, "Z"
    event_id: int  # the chain head when it was taken
    event_hash: str
    events: int  # events with id <= event_id
    prev: str  # MAC of the checkpoint before it in the same file; GENESIS_CHECKPOINT for the first
    key_id: str
    mac: str

    def body(self) -> dict[str, Any]:
        fields = asdict(self)
        fields.pop("mac")
        return {"v": VERSION, **fields}

    def to_dict(self) -> dict[str, Any]:
        return {**self.body(), "mac": self.mac}

    def to_line(self) -> str:
        return canonical_json(self.to_dict())


def sign(key: bytes, *, seq: int, ts: str, event_id: int, event_hash: str, events: int, prev: str) -> Checkpoint:
    unsigned = Checkpoint(seq, ts, event_id, event_hash, events, prev, key_id(key), "")
    return Checkpoint(**{**asdict(unsigned), "mac": _mac(key, unsigned.body())})


def parse(obj: Any, key: bytes) -> Checkpoint | str:
    """The checkpoint in `obj` (a decoded JSON line) if its MAC verifies under `key`, else why not."""
    if not isinstance(obj, dict) or set(obj) != set(_FIELDS):
        return "not a checkpoint (expected the fields " + ", ".join(_FIELDS) + ")"
    for name, kind in _FIELDS.items():
        if type(obj[name]) is not kind:
            return f"not a checkpoint ({name} is not {'an integer' if kind is int else 'a string'})"
    if obj["v"] != VERSION:
        return f"checkpoint format version {obj['v']} is not {VERSION}"
    fields = {k: v for k, v in obj.items() if k != "v"}
    checkpoint = Checkpoint(**fields)
    if not hmac.compare_digest(_mac(key, checkpoint.body()), checkpoint.mac):
        if checkpoint.key_id != key_id(key):
            return f"made with another key (key id {checkpoint.key_id}; this key is {key_id(key)}): forged, or the audit key was replaced"
        return "signature does not verify: the line was altered (or forged without the key)"
    return checkpoint


@dataclass(frozen=True)
class CheckpointProblem:
    source: str
    line: int
    problem: str

    def text(self) -> str:
        return f"{self.source} line {self.line}: {self.problem}"


def decode_line(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def read_file(lines: Iterable[str], key: bytes, source: str) -> tuple[list[Checkpoint], CheckpointProblem | None]:
    """A checkpoint file: every non-blank line must be a checkpoint that verifies and follows
    the previous good one (same chain, next number). Returns the good checkpoints and the
    first problem; a bad line does not hide the good ones after it."""
    good: list[Checkpoint] = []
    first_problem: CheckpointProblem | None = None
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        found = parse(decode_line(raw), key)
        problem = found if isinstance(found, str) else _follows(good[-1] if good else None, found)
        if problem is not None:
            first_problem = first_problem or CheckpointProblem(source, number, problem)
        if not isinstance(found, str):
            good.append(found)
    return good, first_problem


def _follows(before: Checkpoint | None, checkpoint: Checkpoint) -> str | None:
    if before is None:
        if checkpoint.prev == GENESIS_CHECKPOINT and checkpoint.seq == 1:
            return None
        return f"checkpoint {checkpoint.seq} is the first in the file: checkpoint(s) 1..{checkpoint.seq - 1} before it were deleted"
    if checkpoint.prev == before.mac and checkpoint.seq == before.seq + 1:
        return None
    if checkpoint.seq > before.seq + 1:
        gone = f"{before.seq + 1}" if checkpoint.seq == before.seq + 2 else f"{before.seq + 1}..{checkpoint.seq - 1}"
        return f"checkpoint {checkpoint.seq} follows checkpoint {before.seq}: checkpoint(s) {gone} were deleted"
    return f"checkpoint {checkpoint.seq} does not follow checkpoint {before.seq} (lines moved or copied from another file)"


def read_log(lines: Iterable[str], key: bytes, source: str) -> tuple[list[Checkpoint], CheckpointProblem | None]:
    """Checkpoints copied into a log (JSON lines with an `audit_checkpoint` object, or text
    lines holding `audit checkpoint {...}`); other lines are skipped. Only the MAC is
    checked: a log export may start after rotation and interleave several replicas."""
    good: list[Checkpoint] = []
    first_problem: CheckpointProblem | None = None
    for number, raw in enumerate(lines, start=1):
        record = decode_line(raw)
        if isinstance(record, dict) and "audit_checkpoint" in record:
            obj = record["audit_checkpoint"]
        elif LOG_MARKER + "{" in raw:
            obj = decode_line(raw[raw.index(LOG_MARKER) + len(LOG_MARKER) :])
        else:
            continue
        found = parse(obj, key)
        if isinstance(found, str):
            first_problem = first_problem or CheckpointProblem(source, number, found)
        else:
            good.append(found)
    return good, first_problem


def _span(first: int, last: int) -> str:
    return f"event {first}" if first == last else f"events {first}..{last}"


class AnchorCheck:
    """Checks a chain walk against checkpoints; `verify_chain` calls `check` for each event
    that passed its own checks and `at_end` after the last one. A checkpointed event must
    still be there with the same hash and the same number of events up to it, and the
    chain must reach the furthest checkpoint."""

    def __init__(self, checkpoints: Iterable[Checkpoint]) -> None:
        self._pending = sorted(checkpoints, key=lambda c: (c.event_id, c.seq))
        self._next = 0
        self._seen = 0
        self._vouched = 0  # the last event a checkpoint confirmed

    def check(self, event_id: int, stored_hash: str) -> ChainBreak | None:
        self._seen += 1
        while self._next < len(self._pending) and self._pending[self._next].event_id <= event_id:
            cp = self._pending[self._next]
            at = f"checkpoint {cp.seq} of {cp.ts}"
            if cp.event_id < event_id:
                gone = f"missing: {at} anchored event {cp.event_id}, which is no longer in the trail"
                return ChainBreak(cp.event_id, gone + " (deleted, and the later hashes recomputed)")
            if stored_hash != cp.event_hash:
                span = _span(self._vouched + 1, event_id)
                return ChainBreak(event_id, f"hash differs from {at}: {span} changed, inserted or deleted since, the later hashes recomputed")
            if self._seen != cp.events:
                return ChainBreak(event_id, f"{at} counted {cp.events} events up to event {event_id}, the trail now has {self._seen}")
            self._next += 1
            self._vouched = event_id
        return None

    def at_end(self, last_id: int | None) -> ChainBreak | None:
        if self._next >= len(self._pending):
            return None
        cp = self._pending[-1]
        first = (last_id or 0) + 1
        end = f"ends at event {last_id}" if last_id else "is empty"
        anchored = f"missing: checkpoint {cp.seq} of {cp.ts} anchored events up to {cp.event_id}"
        return ChainBreak(first, f"{anchored}, but the trail {end} ({_span(first, cp.event_id)} deleted)")


def anchored_events(checkpoints: Iterable[Checkpoint]) -> tuple[Checkpoint | None, int]:
    """The furthest checkpoint and how many events it covers."""
    last = max(checkpoints, key=lambda c: (c.event_id, c.seq), default=None)
    return last, (last.events if last else 0)
