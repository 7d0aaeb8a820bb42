"""Issue 17: audit appends at throughput. Audited writes commit pending rows without taking
the chain's lock; one chainer round per batch links them (services/audit_chain.py). The
chain verifies with every event in it, a crash between a commit and its round loses
nothing, and a pending row changed or forged while it waits is caught."""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text, update

from hetpool.server.db.models import AuditEventRow
from hetpool.server.db.models_audit import AuditPendingRow
from hetpool.server.services import audit, audit_chain
from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.audit_checkpoint import checkpoint_audit

THREADS, PER_THREAD = 8, 15


def _record(ctx: ServiceContext, object_id: str) -> None:
    with ctx.db.transaction() as session:
        audit.record(session, actor="t", action="x.change", object_kind="X", object_id=object_id, after={"n": object_id}, ts=ctx.clock.now())


def _record_and_crash(ctx: ServiceContext, object_id: str) -> None:
    """Committed, then the process dies before its chainer round (no after-commit callback)."""
    with ctx.db.sessions() as session, session.begin():
        audit.record(session, actor="t", action="x.change", object_kind="X", object_id=object_id, ts=ctx.clock.now())
        session.info.pop("after_commit")


def _trail(ctx: ServiceContext) -> tuple[list[str], int, object]:
    with ctx.db.transaction() as session:
        ids = list(session.execute(select(AuditEventRow.object_id).order_by(AuditEventRow.id)).scalars())
        pending = session.execute(select(AuditPendingRow.id)).all()
        return ids, len(pending), audit.verify(session)


def test_concurrent_appends_make_one_valid_chain_with_every_event(ctx: ServiceContext) -> None:
    chainer = audit_chain.attach(ctx.db, ctx.audit_anchor.key)
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        try:
            for i in range(PER_THREAD):
                _record(ctx, f"{t}-{i}")
        except BaseException as exc:  # noqa: BLE001 -- reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    ids, pending, broken = _trail(ctx)
    assert broken is None
    assert pending == 0  # each writer returned with its event chained
    assert sorted(ids) == sorted(f"{t}-{i}" for t in range(THREADS) for i in range(PER_THREAD))
    for t in range(THREADS):  # one writer's events stay in its order
        mine = [i for i in ids if i.startswith(f"{t}-")]
        assert mine == [f"{t}-{i}" for i in range(PER_THREAD)]
    assert chainer.rounds <= THREADS * PER_THREAD


def test_an_audited_commit_does_not_wait_for_the_chain_lock(ctx: ServiceContext) -> None:
    if ctx.db.dialect != "postgresql":
        pytest.skip("SQLite has one writer at a time whatever the chain does")
    audit_chain.attach(ctx.db, ctx.audit_anchor.key)
    committed = threading.Event()
    with ctx.db.transaction() as holder:
        audit.lock_chain(holder)  # a chainer round (or an inline append) in progress

        def write() -> None:
            _record_and_crash(ctx, "while-locked")
            committed.set()

        thread = threading.Thread(target=write)
        thread.start()
        assert committed.wait(10), "the audited write waited for the chain's lock"
        thread.join()
    assert _trail(ctx)[1] == 1  # committed, waiting for the next round
    audit_chain.chainer_for(ctx.db).chain_now()
    assert _trail(ctx)[0][-1] == "while-locked"


def test_a_crash_between_commit_and_chaining_loses_nothing(ctx: ServiceContext) -> None:
    audit_chain.attach(ctx.db, ctx.audit_anchor.key)
    _record(ctx, "before")
    for i in range(3):
        _record_and_crash(ctx, f"crashed-{i}")
    assert _trail(ctx)[:2] == (["before"], 3)
    audit_chain.detach(ctx.db)  # the restart: a new process attaches and links what was left
    audit_chain.attach(ctx.db, ctx.audit_anchor.key)
    ids, pending, broken = _trail(ctx)
    assert (ids, pending, broken) == (["before", "crashed-0", "crashed-1", "crashed-2"], 0, None)


def test_the_workers_pass_links_leftovers(ctx: ServiceContext) -> None:
    audit_chain.attach(ctx.db, ctx.audit_anchor.key)
    _record_and_crash(ctx, "left")
    checkpoint_audit(ctx)
    ids, pending, broken = _trail(ctx)
    assert (ids, pending, broken) == (["left"], 0, None)


def _verify(api: TestClient) -> dict:
    response = api.get("/api/v1/audit/verify")
    assert response.status_code == 200, response.text
    return response.json()


def test_api_events_are_chained_when_the_request_returns(ctx: ServiceContext, api: TestClient) -> None:
    created = api.post("/api/v1/users", json={"name": "eve", "bindings": [{"role": "auditor"}]})
    assert created.status_code == 201, created.text
    events = api.get("/api/v1/audit", params={"object_id": "eve"}).json()
    assert [e["action"] for e in events] == ["user.create"] and len(events[0]["hash"]) == 64
    report = _verify(api)
    assert report["ok"] and report["unchained_events"] == 0


def test_a_pending_event_changed_while_it_waits_is_caught(ctx: ServiceContext, api: TestClient) -> None:
    _record_and_crash(ctx, "honest")
    _record_and_crash(ctx, "victim")
    with ctx.db.transaction() as session:
        session.execute(update(AuditPendingRow).where(AuditPendingRow.object_id == "victim").values(actor="someone-else"))
    report = _verify(api)
    assert not report["ok"] and report["unchained_events"] >= 1
    assert "does not match its MAC" in report["problem"]
    # The chainer links the honest one (any audited request runs a round) and leaves the
    # changed one where verify keeps naming it.
    audit_chain.chainer_for(ctx.db).chain_now()
    ids, pending, _ = _trail(ctx)
    assert "honest" in ids and "victim" not in ids and pending == 1
    assert not _verify(api)["ok"]


def test_a_forged_pending_event_is_caught(ctx: ServiceContext, api: TestClient) -> None:
    _record_and_crash(ctx, "real")
    with ctx.db.transaction() as session:
        real = session.execute(select(AuditPendingRow)).scalar_one()
        forged = {c: getattr(real, c) for c in ("ts", "actor", "action", "object_kind", "object_id", "before", "after", "key_id", "mac")}
        session.add(AuditPendingRow(**forged | {"object_id": "forged", "nonce": "f" * 32}))
    report = _verify(api)
    assert not report["ok"] and "does not match its MAC" in report["problem"]


def test_an_event_left_unchained_too_long_is_a_finding(ctx: ServiceContext, api: TestClient) -> None:
    _record_and_crash(ctx, "stuck")
    audit_chain.detach(ctx.db)  # no round runs any more (as when no server is up)
    assert _verify(api)["ok"]  # just written: waiting for its round is normal
    ctx.clock.advance(120)
    report = _verify(api)
    assert not report["ok"] and "the chainer is not running" in report["problem"]


def test_tampering_with_a_chained_event_is_still_caught(ctx: ServiceContext, api: TestClient) -> None:
    for name in ("a1", "a2", "a3"):
        assert api.post("/api/v1/users", json={"name": name, "bindings": [{"role": "auditor"}]}).status_code == 201
    with ctx.db.transaction() as session:
        target = session.execute(select(AuditEventRow.id).where(AuditEventRow.object_id == "a2")).scalar_one()
        session.execute(text("UPDATE audit_events SET actor = 'mallory' WHERE id = :i"), {"i": target})
    report = _verify(api)
    assert not report["ok"] and report["first_bad_event"] == target


def test_a_replica_with_another_key_leaves_pending_rows_to_their_writer(ctx: ServiceContext, api: TestClient) -> None:
    _record_and_crash(ctx, "from-a")  # written by this server (replica A)
    replica_b = audit_chain.AuditChainer(ctx.db, b"b" * 64)
    assert replica_b.chain_now() == audit.ChainRound(0, ())  # not its key: neither linked nor refused
    ids, pending, _ = _trail(ctx)
    assert "from-a" not in ids and pending == 1
    assert _verify(api)["ok"]
    audit_chain.chainer_for(ctx.db).chain_now()  # A's next round
    ids, pending, broken = _trail(ctx)
    assert "from-a" in ids and pending == 0 and broken is None


def test_worker_transactions_link_their_events_as_they_commit(ctx: ServiceContext, demo: TestClient) -> None:
    """The leader's pipelines run inside audit.linked_at_commit(): a transition's event is
    linked in the transaction that makes it (one commit), never left as a pending row for
    a chainer round; outside it, the same write goes through the pending rows as before."""
    from hetpool.server.workers.loop import run_pass

    chainer = audit_chain.chainer_for(ctx.db)
    assert chainer is not None
    task = {"name": "linked", "tenant": "ai-lab/nlp/llm-sft", "type": "training", "command": "sleep 0"}
    assert demo.post("/api/v1/tasks", json=task).status_code == 201
    rounds = chainer.rounds
    with audit.linked_at_commit():
        run_pass(ctx)  # admits and dispatches: task.admitted, task.dispatched
    assert chainer.rounds == rounds, "a worker transaction waited for a chainer round"
    events = demo.get("/api/v1/audit", params={"object_kind": "Task"}).json()
    assert {"task.submit", "task.admitted", "task.dispatched"} <= {e["action"] for e in events}, events
    ids, pending, broken = _trail(ctx)
    assert pending == 0 and broken is None
    _record(ctx, "outside")  # not a worker thread: a pending row and a round, as before
    assert chainer.rounds == rounds + 1
