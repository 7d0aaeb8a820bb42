"""Anchoring the audit chain outside its database: the key file, the checkpoint file, the log.

What a checkpoint is and why: governance/audit_anchor.py. Here: where the key comes from
(a file of mode 600 in the data dir, made at first start, or a configured file shared by
the replicas), how a checkpoint is appended (under a file lock, chained to the file's last
good line, copied to the log), and verification of the trail against the checkpoints.

A checkpoint is only written when the events since the previous one still link up to the
head, so a checkpoint never blesses a trail that was rewritten since the last one; a
refusal is logged as an error on every attempt until someone looks.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from hetpool.core.errors import ConflictError
from hetpool.governance import audit_anchor as anchor
from hetpool.governance.audit import ChainBreak
from hetpool.server.config_file import ConfigError
from hetpool.server.db.models import AuditEventRow
from hetpool.server.services import audit
from hetpool.server.settings import Settings

log = logging.getLogger(__name__)
# Its own logger, always at INFO: the copies in the log are the checkpoints' off-site
# backup, and must not vanish when an operator turns the server's log level to warning.
checkpoint_log = logging.getLogger("hetpool.audit.checkpoint")
checkpoint_log.setLevel(logging.INFO)

KEY_BYTES = 32
_TAIL = 64 * 1024  # the last lines of the file hold the checkpoint a new one chains to


class AuditKeyError(ConfigError):
    """The audit key file is missing (where it must be given), unsafe or unusable."""


class ChainBrokenError(ConflictError):
    """The trail changed since the last checkpoint: no new checkpoint is written over it."""


def load_key(path: Path, create: bool) -> bytes:
    """The key in `path`; made (random, mode 600) when missing and `create`. A key other
    users may read is refused: with it anyone who can write the database can forge
    checkpoints for a rewritten trail."""
    try:
        info = path.stat()
    except FileNotFoundError:
        if not create:
            raise AuditKeyError(
                f"audit key file {path}: not found. A configured key file (audit_key_file, HETPOOL_AUDIT_KEY_FILE) is never made "
                f"by hetpool, so that replicas cannot end up with different keys: create it once (head -c 32 /dev/urandom | od -An -tx1 "
                f"| tr -d ' \\n' > {path}; chmod 600 {path}) and give every replica the same file"
            ) from None
        return _create_key(path)
    if not stat.S_ISREG(info.st_mode):
        raise AuditKeyError(f"audit key file {path}: not a regular file")
    if info.st_mode & 0o077:
        raise AuditKeyError(
            f"audit key file {path} is accessible to group or others (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"only the server's user may read it: chmod 600 {path}"
        )
    key = path.read_bytes().strip()
    if len(key) < KEY_BYTES:
        raise AuditKeyError(f"audit key file {path}: holds {len(key)} bytes; at least {KEY_BYTES} are needed")
    return key


def _create_key(path: Path) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written whole under a temporary name, then linked: a replica starting at the same
    # moment reads either no key or the complete one, and exactly one key wins.
    partial = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, (secrets.token_hex(KEY_BYTES) + "\n").encode())
        os.fsync(fd)
        os.close(fd)
        try:
            os.link(partial, path)
            log.warning("audit key created at %s: back it up with the checkpoint file (docs/governance.md#audit)", path)
        except FileExistsError:
            pass
    finally:
        partial.unlink(missing_ok=True)
    return load_key(path, create=False)


@dataclass(frozen=True)
class CheckpointResult:
    checkpoint: anchor.Checkpoint
    written: bool  # False: the head had not moved since this (earlier) checkpoint


def _ts(now: datetime) -> str:
    return now.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class AuditAnchor:
    """One server's key and checkpoint file (ServiceContext.audit_anchor)."""

    def __init__(self, key_file: Path, checkpoint_file: Path, *, create_key: bool, interval_s: float = 60.0) -> None:
        self.key_file = key_file
        self.checkpoint_file = checkpoint_file
        self.create_key = create_key
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self.next_due: datetime | None = None  # the worker step's schedule (workers/audit_checkpoint.py)

    @classmethod
    def from_settings(cls, settings: Settings) -> AuditAnchor:
        key_file = settings.audit_key_file or settings.data_dir / "audit.key"
        checkpoints = settings.audit_checkpoint_file or settings.data_dir / "audit-checkpoints.jsonl"
        return cls(key_file, checkpoints, create_key=settings.audit_key_file is None, interval_s=settings.audit_checkpoint_interval_s)

    @cached_property
    def key(self) -> bytes:
        return load_key(self.key_file, self.create_key)

    # -------------------------------------------------------------------- reading
    def read(self, files: list[Path] | None = None, logs: list[Path] = ()) -> tuple[list[anchor.Checkpoint], anchor.CheckpointProblem | None]:
        """Good checkpoints of the checkpoint files (default: this server's) and of logs, and
        the first problem found. This server's file may not exist yet; one named must."""
        found: list[anchor.Checkpoint] = []
        first: anchor.CheckpointProblem | None = None
        sources = [(p, anchor.read_file) for p in (files if files is not None else [self.checkpoint_file])]
        for path, reader in [*sources, *[(p, anchor.read_log) for p in logs]]:
            try:
                text = path.read_bytes().decode("utf-8", errors="replace")
            except FileNotFoundError:
                if files is not None or reader is anchor.read_log:
                    first = first or anchor.CheckpointProblem(str(path), 0, "file not found")
                continue
            good, problem = reader(text.splitlines(), self.key, str(path))
            found += good
            first = first or problem
        return list({c.mac: c for c in found}.values()), first

    def _last_good(self, fd: int) -> anchor.Checkpoint | None:
        size = os.fstat(fd).st_size
        start = max(0, size - _TAIL)
        while True:
            lines = os.pread(fd, size - start, start).decode("utf-8", errors="replace").splitlines()
            if start > 0:
                lines = lines[1:]  # possibly cut in the middle
            for raw in reversed(lines):
                found = anchor.parse(anchor.decode_line(raw), self.key)
                if not isinstance(found, str):
                    return found
            if start == 0:
                return None
            start = 0  # the tail was damaged: look through the whole file

    # -------------------------------------------------------------------- writing
    @contextmanager
    def _locked_file(self) -> Iterator[int]:
        self.checkpoint_file.parent.mkdir(parents=True, exist_ok=True)
        # O_APPEND and one write per line; the lock orders replicas sharing the file.
        fd = os.open(self.checkpoint_file, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            with self._lock:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield fd
        finally:
            os.close(fd)  # also drops the lock

    def checkpoint(self, db, now: datetime) -> CheckpointResult:
        """Append a checkpoint of the chain head (unless it has not moved since the last one).
        Raises ChainBrokenError when the trail since the last checkpoint no longer links up."""
        with self._locked_file() as fd:
            last = self._last_good(fd)
            with db.transaction() as session:
                head = audit.head(session)
                if head is None:
                    raise ChainBrokenError("the audit trail is empty: nothing to checkpoint")
                if last is not None and (last.event_id, last.event_hash) == (head.last_id, head.hash):
                    return CheckpointResult(last, written=False)
                broken = audit.verify(session) if last is None else audit.verify_since(session, last.event_id, last.event_hash, head)
                if broken is not None:
                    log.error("audit chain broken at event %s: %s; no checkpoint written", broken.event_id, broken.problem)
                    raise ChainBrokenError(f"audit chain broken at event {broken.event_id}: {broken.problem}; no checkpoint written")
                events = session.execute(select(func.count(AuditEventRow.id)).where(AuditEventRow.id <= head.last_id)).scalar_one()
            previous = (last.seq, last.mac) if last else (0, anchor.GENESIS_CHECKPOINT)
            made = anchor.sign(
                self.key, seq=previous[0] + 1, ts=_ts(now), event_id=head.last_id, event_hash=head.hash, events=events, prev=previous[1]
            )
            line = made.to_line()
            ends_cleanly = os.fstat(fd).st_size == 0 or os.pread(fd, 1, os.fstat(fd).st_size - 1) == b"\n"
            os.write(fd, (("" if ends_cleanly else "\n") + line + "\n").encode())
            os.fsync(fd)
        checkpoint_log.info(anchor.LOG_MARKER + line, extra={"audit_checkpoint": made.to_dict()})
        return CheckpointResult(made, written=True)


# ------------------------------------------------------------------------ verification
def _checkpoint_info(cp: anchor.Checkpoint | None) -> dict | None:
    return None if cp is None else {"seq": cp.seq, "ts": cp.ts, "event_id": cp.event_id, "event_hash": cp.event_hash, "events": cp.events}


# Pending events older than this are a finding: the chainer links them within milliseconds.
UNCHAINED_BOUND = timedelta(seconds=60)


def verify(
    session: Session,
    checkpoints: list[anchor.Checkpoint],
    problem: anchor.CheckpointProblem | None,
    *,
    key: bytes | None = None,
    now: datetime | None = None,
) -> dict:
    """The trail checked link by link and against the checkpoints (AnchoredVerifyResponse);
    the events still waiting for the chainer too: their MAC under `key` (not checked
    without it), and, given `now`, whether one waited longer than UNCHAINED_BOUND."""
    broken: ChainBreak | None = audit.verify(session, anchor.AnchorCheck(checkpoints))
    total = audit.count(session)
    waiting, pending_problem = audit.unchained(session, key, now, UNCHAINED_BOUND)
    last, covered = anchor.anchored_events(checkpoints)
    report = {
        "ok": broken is None and problem is None and pending_problem is None,
        "events": total,
        "unchained_events": waiting,
        "checkpoints": len(checkpoints),
        "anchored_events": min(covered, total),
        "unanchored_events": max(0, total - covered),
        "last_checkpoint": _checkpoint_info(last),
    }
    if broken is not None:
        report |= {"first_bad_event": broken.event_id, "problem": broken.problem}
    elif pending_problem is not None:
        report |= {"problem": pending_problem}
    if problem is not None:
        report |= {"checkpoint_problem": problem.text(), "bad_checkpoint_line": problem.line}
    return report
