"""Issue 14, finding 6: whoever can write the database could rewrite the audit trail so that
it verifies — delete the tail *and* move the head, or change an event and recompute every
later hash and the head. Checkpoints of the head under a key outside the database
(services/audit_anchor.py) catch both, and damage to the checkpoints themselves.

The attacks here go straight to the database (as a task or an operator with the database
password could), never through hetpool's own code paths.
"""

from __future__ import annotations

import json
import logging
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select, update

from hetpool.governance.audit import GENESIS_HASH, event_hash
from hetpool.governance.audit_anchor import GENESIS_CHECKPOINT, sign
from hetpool.server.app import create_app, make_context
from hetpool.server.config_file import ConfigError
from hetpool.server.db.models import AuditEventRow
from hetpool.server.db.models_audit import AuditHeadRow
from hetpool.server.leader import WORKERS, LeaderElector
from hetpool.server.logging_setup import JsonFormatter
from hetpool.server.services import audit
from hetpool.server.services.audit_anchor import AuditKeyError
from hetpool.server.services.context import ServiceContext
from hetpool.server.settings import Settings
from hetpool.server.workers.loop import run_pass
from tests.server.test_leader import wait_until


# ----------------------------------------------------------------------------- helpers
def _add_events(api: TestClient, n: int, prefix: str) -> None:
    """n audited changes through the API (one user.create each)."""
    for i in range(n):
        created = api.post("/api/v1/users", json={"name": f"{prefix}{i}", "bindings": [{"role": "auditor"}]})
        assert created.status_code == 201, created.text


def _checkpoint(api: TestClient) -> dict:
    response = api.post("/api/v1/audit/checkpoints")
    assert response.status_code == 200, response.text
    return response.json()


def _verify(api: TestClient) -> dict:
    response = api.get("/api/v1/audit/verify")
    assert response.status_code == 200, response.text
    return response.json()


def _last_id(ctx: ServiceContext) -> int:
    with ctx.db.transaction() as session:
        return session.execute(select(AuditHeadRow.last_id)).scalar_one()


def _truncate_and_move_head(ctx: ServiceContext, keep_up_to: int) -> None:
    """Delete every event after `keep_up_to` and point the head at it: the chain holds."""
    with ctx.db.transaction() as session:
        kept = session.execute(select(AuditEventRow.hash).where(AuditEventRow.id == keep_up_to)).scalar_one()
        session.execute(delete(AuditEventRow).where(AuditEventRow.id > keep_up_to))
        session.execute(update(AuditHeadRow).values(last_id=keep_up_to, hash=kept))


def _rewrite_and_rehash(ctx: ServiceContext, event_id: int) -> None:
    """Change one event's actor, recompute its hash, every later one and the head."""
    with ctx.db.transaction() as session:
        rows = session.execute(select(AuditEventRow).where(AuditEventRow.id >= event_id).order_by(AuditEventRow.id)).scalars().all()
        rows[0].actor = "mallory"
        before = session.execute(select(AuditEventRow.hash).where(AuditEventRow.id < event_id).order_by(AuditEventRow.id.desc()).limit(1))
        prev = before.scalar() or GENESIS_HASH  # linked to whatever is before it now
        for row in rows:
            row.prev_hash = prev
            row.hash = prev = event_hash(prev, audit.hashed_fields(row))
        session.flush()
        session.execute(update(AuditHeadRow).values(last_id=rows[-1].id, hash=rows[-1].hash))


def _checkpoint_file(ctx: ServiceContext) -> Path:
    return ctx.settings.data_dir / "audit-checkpoints.jsonl"


# ------------------------------------------------------------------------- the attacks
def test_deleting_the_tail_and_moving_the_head_is_found_after_a_checkpoint(demo: TestClient, ctx: ServiceContext) -> None:
    taken = _checkpoint(demo)
    assert taken["written"] and taken["seq"] == 1 and taken["event_id"] == _last_id(ctx)
    assert _verify(demo)["ok"]
    end = taken["event_id"]

    _truncate_and_move_head(ctx, end - 3)
    result = _verify(demo)
    assert result["ok"] is False and result["first_bad_event"] == end - 2
    assert f"checkpoint 1 of {taken['ts']} anchored events up to {end}" in result["problem"]
    assert f"the trail ends at event {end - 3} (events {end - 2}..{end} deleted)" in result["problem"]
    # The chain alone is consistent: without the checkpoint this attack went unseen.
    _checkpoint_file(ctx).rename(ctx.settings.data_dir / "aside.jsonl")
    assert _verify(demo)["ok"] is True
    (ctx.settings.data_dir / "aside.jsonl").rename(_checkpoint_file(ctx))
    # ... and no checkpoint is written over the truncated trail.
    refused = demo.post("/api/v1/audit/checkpoints")
    assert refused.status_code == 409 and f"the chain head is at event {end - 3}" in refused.json()["message"]
    assert len(_checkpoint_file(ctx).read_text().splitlines()) == 1


def test_rewriting_an_event_and_rehashing_everything_after_is_found(demo: TestClient, ctx: ServiceContext) -> None:
    first = _checkpoint(demo)
    _add_events(demo, 4, "r")
    second = _checkpoint(demo)
    assert second["seq"] == 2 and second["event_id"] > first["event_id"] + 3

    _rewrite_and_rehash(ctx, first["event_id"] + 2)
    with ctx.db.transaction() as session:
        assert audit.verify(session) is None  # the chain and the head hold: the forgery is consistent
    result = _verify(demo)
    assert result["ok"] is False and result["first_bad_event"] == second["event_id"]
    span = f"events {first['event_id'] + 1}..{second['event_id']} changed"
    assert f"hash differs from checkpoint 2 of {second['ts']}: {span}" in result["problem"]
    refused = demo.post("/api/v1/audit/checkpoints")
    assert refused.status_code == 409 and "hash differs from the last checkpoint" in refused.json()["message"]

    # Further back: the first checkpoint no longer matches either, and is named first.
    _rewrite_and_rehash(ctx, 3)
    result = _verify(demo)
    assert result["first_bad_event"] == first["event_id"] and f"events 1..{first['event_id']} changed" in result["problem"]


def test_deleting_a_checkpointed_event_and_rehashing_is_found(demo: TestClient, ctx: ServiceContext) -> None:
    taken = _checkpoint(demo)
    _add_events(demo, 2, "d")
    gone = taken["event_id"]
    with ctx.db.transaction() as session:
        session.execute(delete(AuditEventRow).where(AuditEventRow.id == gone))
    _rewrite_and_rehash(ctx, gone + 1)  # relinks the next event to the one before the gap
    result = _verify(demo)
    assert result["ok"] is False and result["first_bad_event"] == gone
    assert f"anchored event {gone}, which is no longer in the trail" in result["problem"]


# ------------------------------------------------------------------ the checkpoint file
def test_deleted_or_edited_checkpoint_lines_are_found(demo: TestClient, ctx: ServiceContext) -> None:
    for i in range(3):
        _add_events(demo, 1, f"c{i}")
        _checkpoint(demo)
    path = _checkpoint_file(ctx)
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and _verify(demo)["ok"]

    def damaged(new_lines: list[str]) -> dict:
        path.write_text("".join(line + "\n" for line in new_lines))
        result = _verify(demo)
        path.write_text("".join(line + "\n" for line in lines))
        assert result["ok"] is False and result.get("first_bad_event") is None  # the trail itself is fine
        return result

    middle = damaged([lines[0], lines[2]])
    assert middle["bad_checkpoint_line"] == 2 and "checkpoint 3 follows checkpoint 1: checkpoint(s) 2 were deleted" in middle["checkpoint_problem"]
    start = damaged(lines[1:])
    assert start["bad_checkpoint_line"] == 1 and "checkpoint(s) 1..1 before it were deleted" in start["checkpoint_problem"]
    edited = json.loads(lines[1]) | {"event_id": 1, "events": 1}
    altered = damaged([lines[0], json.dumps(edited), lines[2]])
    assert altered["bad_checkpoint_line"] == 2 and "signature does not verify: the line was altered" in altered["checkpoint_problem"]
    garbage = damaged([lines[0], "not json", lines[1], lines[2]])
    assert garbage["bad_checkpoint_line"] == 2 and "not a checkpoint" in garbage["checkpoint_problem"]
    assert _verify(demo)["ok"]


def test_a_checkpoint_forged_without_the_key_is_refused(demo: TestClient, ctx: ServiceContext) -> None:
    real = _checkpoint(demo)
    _rewrite_and_rehash(ctx, 4)
    # The attacker signs the forged head with a key of its own and chains it to the file.
    with ctx.db.transaction() as session:
        head = audit.head(session)
    last = json.loads(_checkpoint_file(ctx).read_text().splitlines()[-1])
    forged = sign(b"k" * 32, seq=2, ts=real["ts"], event_id=head.last_id, event_hash=head.hash, events=head.last_id, prev=last["mac"])
    with _checkpoint_file(ctx).open("a") as out:
        out.write(forged.to_line() + "\n")
    result = _verify(demo)
    assert result["ok"] is False and result["bad_checkpoint_line"] == 2
    assert "made with another key" in result["checkpoint_problem"] and "forged" in result["checkpoint_problem"]
    assert result["first_bad_event"] == real["event_id"] and "hash differs from checkpoint 1" in result["problem"]
    assert result["last_checkpoint"]["seq"] == 1  # the forged one anchors nothing

    # Copying the real key id into the forged line does not help.
    mimic = json.loads(forged.to_line()) | {"key_id": last["key_id"]}
    _checkpoint_file(ctx).write_text(json.dumps(last) + "\n" + json.dumps(mimic) + "\n")
    assert "signature does not verify" in _verify(demo)["checkpoint_problem"]


# ------------------------------------------------------------------------------ the key
def test_the_key_file_is_made_with_mode_600_and_an_exposed_one_refuses_the_start(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", database_url=f"sqlite:///{tmp_path / 'h.db'}", run_workers=False)
    ctx = make_context(settings)
    key = settings.data_dir / "audit.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_text().strip()) == 64
    ctx.db.dispose()
    make_context(settings).db.dispose()  # a second start reads the same key
    assert len(list(settings.data_dir.glob("*.key*"))) == 1

    for mode in (0o644, 0o640, 0o604, 0o660):
        key.chmod(mode)
        with pytest.raises(AuditKeyError) as refused:
            make_context(settings)
        assert isinstance(refused.value, ConfigError)
        assert f"audit key file {key} is accessible to group or others (mode {mode:04o})" in str(refused.value)
        assert f"chmod 600 {key}" in str(refused.value)
    key.chmod(0o600)

    # A configured key file (shared by replicas) is never made: a missing one is an error.
    shared = Settings(**{**settings.model_dump(), "audit_key_file": tmp_path / "shared.key"})
    with pytest.raises(AuditKeyError, match="shared.key: not found"):
        make_context(shared)
    (tmp_path / "shared.key").write_text("short")
    (tmp_path / "shared.key").chmod(0o600)
    with pytest.raises(AuditKeyError, match="at least 32 are needed"):
        make_context(shared)


# ------------------------------------------------------------------- not yet anchored
def test_events_after_the_last_checkpoint_are_reported_not_yet_anchored(demo: TestClient, ctx: ServiceContext) -> None:
    before = _verify(demo)
    assert before["ok"] and before["checkpoints"] == 0 and before["last_checkpoint"] is None
    assert before["unanchored_events"] == before["events"] > 0
    taken = _checkpoint(demo)
    _add_events(demo, 3, "n")
    result = _verify(demo)
    with ctx.db.transaction() as session:
        after_it = len(session.execute(select(AuditEventRow.id).where(AuditEventRow.id > taken["event_id"])).all())
    assert result["ok"] and result["checkpoints"] == 1 and result["last_checkpoint"]["event_id"] == taken["event_id"]
    assert result["anchored_events"] == taken["events"] and result["unanchored_events"] == after_it >= 3
    # Asking again without new events writes nothing new.
    again = demo.post("/api/v1/audit/checkpoints").json()
    assert again["written"] is True and _checkpoint(demo)["written"] is False


# ------------------------------------------------------------------- who checkpoints
def test_the_worker_pass_checkpoints_on_its_interval_and_copies_to_the_log(ctx: ServiceContext, caplog: pytest.LogCaptureFixture) -> None:
    with ctx.db.transaction() as session:
        audit.record(session, actor="t", action="x.change", object_kind="X", object_id="1", ts=ctx.clock.now())
    with caplog.at_level(logging.INFO, logger="hetpool.audit.checkpoint"):
        run_pass(ctx)
    lines = _checkpoint_file(ctx).read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["event_id"] == _last_id(ctx) and json.loads(lines[0])["prev"] == GENESIS_CHECKPOINT
    [logged] = [r for r in caplog.records if r.name == "hetpool.audit.checkpoint"]
    assert json.loads(JsonFormatter().format(logged))["audit_checkpoint"] == json.loads(lines[0])

    with ctx.db.transaction() as session:
        audit.record(session, actor="t", action="x.change", object_kind="X", object_id="2", ts=ctx.clock.now())
    ctx.clock.advance(30)
    run_pass(ctx)
    assert len(_checkpoint_file(ctx).read_text().splitlines()) == 1  # not due yet
    ctx.clock.advance(31)
    run_pass(ctx)
    lines = _checkpoint_file(ctx).read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["event_id"] == _last_id(ctx)
    ctx.clock.advance(61)
    run_pass(ctx)
    assert len(_checkpoint_file(ctx).read_text().splitlines()) == 2  # due, but nothing new to anchor


def test_a_clean_shutdown_of_the_leader_checkpoints_and_of_a_standby_does_not(ctx: ServiceContext, admin_token: str) -> None:
    ctx.settings.run_workers, ctx.settings.run_connector_sync = True, False
    ctx.audit_anchor.next_due = datetime(2100, 1, 1, tzinfo=UTC)  # no periodic checkpoint in this test
    other = LeaderElector(ctx, WORKERS, holder="another-replica")
    assert other.try_acquire()  # the clock is fixed: its lease never expires

    def serve_once(prefix: str, leads: bool) -> None:
        app = create_app(ctx=ctx)
        with TestClient(app, headers={"Authorization": f"Bearer {admin_token}"}) as client:
            if leads:
                wait_until(app.state.worker_loops[0].is_leader)  # the loop thread takes the lease
            _add_events(client, 1, prefix)
            assert not _checkpoint_file(ctx).exists()

    serve_once("standby", leads=False)
    assert not _checkpoint_file(ctx).exists()
    other.release()
    serve_once("leader", leads=True)
    lines = _checkpoint_file(ctx).read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["event_id"] == _last_id(ctx)
