"""Group commit of task submissions: many `POST /api/v1/tasks`, one transaction.

Why: a submit's own checks are cheap (the spec resolved against the cached catalog, the
cached per-shape verdicts), but one transaction per submit pays, every time, for reading
the inventory revision and node health, the insert, the audit event, the commit and a
round of the audit chain. At a few hundred submits per second that, not the checks, is
where a replica's CPU and the database's commits go (docs/operations.md, "Capacity").

How: API threads hand their document to the process's batcher and wait. One committer
thread takes whatever has arrived (at most `max_batch`) and admits it all in one
transaction: the inventory, node health and each tenant's budget are read once for the
batch (tasks.AdmissionView), rows are inserted together, and every audit event of the
batch is linked into the chain in that same transaction as it commits, under one chain
lock (audit.link_at_commit). Then each caller gets its answer. There is no timer: while
one batch commits the next gathers, so a lone submit is a batch of one and waits for
nobody, and under load batches grow by themselves.

Nothing is acknowledged before its commit, and one submit cannot sink the others:
- a task refused by a check (bad spec, never fits, over quota, over budget…) gets its own
  error; the checks add nothing to the session before they pass, so the batch goes on;
- if the batch's transaction fails as a whole (an Idempotency-Key another replica took
  meanwhile, a lost connection), each of its submits is retried alone on the one-task
  path (idempotency.submit), which answers exactly as before batching;
- but a connection lost *during the commit* leaves it unknown whether the batch was
  committed: then only submits with an Idempotency-Key are retried (the key finds the task
  if it exists), and the others get the error, as a lone submit would — retrying them
  could create a task twice.

Callers wait as they came: an API coroutine on a future (no thread of the pool held while
the batch commits; each event loop is woken once per batch), a thread on an event.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from hetpool.server.db.models_idempotency import IdempotencyKeyRow
from hetpool.server.schemas.tasks import TaskResponse
from hetpool.server.services import audit, idempotency
from hetpool.server.services import tasks as task_service
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.task_lifecycle import get_row
from hetpool.server.services.task_views import task_response

log = logging.getLogger(__name__)
MAX_BATCH = 128  # submits per transaction: bounds a batch's time and the rows it locks
IDLE_EXIT_S = 2.0


class _PartialWrite(Exception):
    """A submit failed after adding rows to the batch's session (not a check: they add
    nothing): the batch cannot commit around it."""


@dataclass(eq=False)
class _Submit:
    doc: dict
    user_id: int
    actor: str
    key: str | None
    digest: str | None
    # How the caller waits: a thread on `done`, or a coroutine on `future` (in `loop`).
    done: threading.Event = field(default_factory=threading.Event)
    loop: asyncio.AbstractEventLoop | None = None
    future: asyncio.Future | None = None
    answer: tuple[TaskResponse, bool] | None = None
    error: BaseException | None = None
    settled: bool = False

    def outcome(self) -> tuple[TaskResponse, bool]:
        if self.error is not None:
            raise self.error
        assert self.answer is not None
        return self.answer


def _resolve(items: list[_Submit]) -> None:
    """In the callers' event loop: wake each waiting coroutine."""
    for item in items:
        if not item.future.done():  # a caller that went away leaves a cancelled future
            item.future.set_result(None)


class SubmitBatcher:
    """The process's submit committer for one ServiceContext (submitter(ctx))."""

    def __init__(self, ctx: ServiceContext, max_batch: int = MAX_BATCH) -> None:
        self.ctx = ctx
        self.max_batch = max_batch
        self._waiting: deque[_Submit] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.batches = 0  # committed batches (tests and metrics look)
        self.largest = 0
        self.fallbacks = 0  # batches retried one submit at a time

    def _item(self, doc: dict, user_id: int, actor: str, key: str | None) -> _Submit:
        digest = None
        if key is not None:
            idempotency.check_key(key)
            digest = idempotency.body_hash(doc)
        return _Submit(doc, user_id, actor, key, digest)

    def _enqueue(self, item: _Submit) -> bool:
        """Hand `item` to the committer thread; False once closed (the caller goes alone)."""
        with self._cond:
            if self._closed:
                return False
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="submit-batcher", daemon=True)
                self._thread.start()
            self._waiting.append(item)
            self._cond.notify()
        return True

    def submit(self, doc: dict, *, user_id: int, actor: str, key: str | None) -> tuple[TaskResponse, bool]:
        """Submit `doc` (kind stripped); returns (task body, replayed). Raises what the
        one-task path raises for this document."""
        item = self._item(doc, user_id, actor, key)
        if not self._enqueue(item):
            return idempotency.submit(self.ctx, doc, user_id=user_id, actor=actor, key=key)
        item.done.wait()
        return item.outcome()

    async def submit_async(self, doc: dict, *, user_id: int, actor: str, key: str | None) -> tuple[TaskResponse, bool]:
        """`submit` for a coroutine: it waits without holding a thread of the pool."""
        item = self._item(doc, user_id, actor, key)
        item.loop = asyncio.get_running_loop()
        item.future = item.loop.create_future()
        if not self._enqueue(item):
            return await asyncio.to_thread(idempotency.submit, self.ctx, doc, user_id=user_id, actor=actor, key=key)
        await asyncio.shield(item.future)  # a client gone away does not take the answer from the batch
        return item.outcome()

    def close(self) -> None:
        """Answer what is waiting, then stop; later submits take the one-task path."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._waiting and not self._closed:
                    self._cond.wait(IDLE_EXIT_S)
                if not self._waiting:
                    # Idle (or closed): the thread ends, and the next submit starts another,
                    # so an idle context (a test's, a replica without load) holds no thread.
                    self._thread = None
                    return
                batch = [self._waiting.popleft() for _ in range(min(self.max_batch, len(self._waiting)))]
            try:
                self._commit(batch)
            except BaseException as exc:  # never leave a caller waiting
                log.exception("submit batch failed")
                for item in batch:
                    if not item.settled:
                        item.error = exc
            finally:
                _settle(batch)

    def _commit(self, batch: list[_Submit]) -> None:
        committing = False
        try:
            with self.ctx.db.transaction() as session:
                answers = self._admit_all(session, batch)
                committing = True  # leaving the block commits
        except Exception as exc:
            self.fallbacks += 1
            self._after_failed_batch(batch, exc, unknown_outcome=committing and _lost_connection(exc))
            return
        self.batches += 1
        self.largest = max(self.largest, len(batch))
        for item in batch:
            outcome = answers[item]
            if isinstance(outcome, BaseException):
                item.error = outcome
            else:
                item.answer = outcome

    def _after_failed_batch(self, batch: list[_Submit], exc: Exception, *, unknown_outcome: bool) -> None:
        """The whole transaction failed: each submit alone, as if there were no batching —
        except when the connection was lost during the commit, which may have happened:
        then only submits with an Idempotency-Key are retried (the key finds the task if
        it was committed); the others get the error, as one unbatched submit would."""
        log.info("submit batch of %d failed as a whole (%s: %s); retrying each alone", len(batch), type(exc).__name__, exc)
        for item in batch:
            if unknown_outcome and item.key is None:
                item.error = exc
                continue
            try:
                item.answer = idempotency.submit(self.ctx, item.doc, user_id=item.user_id, actor=item.actor, key=item.key)
            except Exception as single:
                item.error = single

    def _admit_all(self, session: Session, batch: list[_Submit]) -> dict[_Submit, tuple[TaskResponse, bool] | BaseException]:
        ctx = self.ctx
        session.info["submit_batch"] = len(batch)  # for whoever looks at the transaction (tests)
        audit.link_at_commit(session)
        view = task_service.AdmissionView.read(ctx, session)
        stored = _stored_keys(ctx, session, batch)
        made: dict[tuple[int, str], tuple[object, str]] = {}  # keys whose task this batch creates
        rows: dict[_Submit, tuple[object, bool]] = {}
        answers: dict[_Submit, tuple[TaskResponse, bool] | BaseException] = {}
        for item in batch:
            slot = (item.user_id, item.key) if item.key is not None else None
            try:
                if slot in made:
                    row, digest = made[slot]
                    if digest != item.digest:
                        raise idempotency.key_conflict(item.key, row.id)
                    rows[item] = (row, True)
                    continue
                found = stored.get(slot) if slot else None
                if found is not None:
                    if found.body_hash != item.digest:
                        raise idempotency.key_conflict(item.key, found.task_id)
                    rows[item] = (get_row(session, found.task_id), True)
                    continue
                added = len(session.new)
                try:
                    row = task_service.submit(ctx, session, item.doc, item.actor, view)
                except Exception as exc:
                    if len(session.new) != added:
                        raise _PartialWrite(exc) from exc  # rows of its own in the session: the batch falls back
                    raise
            except _PartialWrite:
                raise
            except Exception as exc:  # this submit's own answer; the others go on
                answers[item] = exc
                continue
            if slot is not None:
                session.add(IdempotencyKeyRow(user_id=item.user_id, key=item.key, task_id=row.id, body_hash=item.digest, created_at=ctx.clock.now()))
                made[slot] = (row, item.digest)
            rows[item] = (row, False)
        session.flush()  # every insert, and the (user, key) uniqueness, before the answers
        for item, (row, replayed) in rows.items():
            answers[item] = (task_response(session, row, ctx=ctx), replayed)
        return answers


def _lost_connection(exc: Exception) -> bool:
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def _settle(batch: list[_Submit]) -> None:
    """Wake every caller of the batch: threads one by one, each event loop once."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Submit]] = {}
    for item in batch:
        item.settled = True
        if item.loop is None:
            item.done.set()
        else:
            by_loop.setdefault(item.loop, []).append(item)
    for loop, items in by_loop.items():
        try:
            loop.call_soon_threadsafe(_resolve, items)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass


def _stored_keys(ctx: ServiceContext, session: Session, batch: list[_Submit]) -> dict[tuple[int, str], IdempotencyKeyRow]:
    """The live stored records of the batch's Idempotency-Keys (expired ones purged first,
    once per user and batch, as the one-task path does per request)."""
    by_user: dict[int, set[str]] = {}
    for item in batch:
        if item.key is not None:
            by_user.setdefault(item.user_id, set()).add(item.key)
    found = {}
    for user_id, keys in by_user.items():
        idempotency.purge_expired(ctx, session, user_id)
        stmt = select(IdempotencyKeyRow).where(IdempotencyKeyRow.user_id == user_id, IdempotencyKeyRow.key.in_(sorted(keys)))
        found.update(((r.user_id, r.key), r) for r in session.execute(stmt).scalars())
    return found


def submitter(ctx: ServiceContext) -> SubmitBatcher:
    return ctx.process_state("submit_batcher", lambda: SubmitBatcher(ctx))
