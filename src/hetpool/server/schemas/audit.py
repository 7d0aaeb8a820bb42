"""Bodies of the audit trail: events, verification of the chain and its checkpoints
(services/audit.py, services/audit_anchor.py)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from hetpool.server.schemas.common import ApiModel


class AuditEvent(ApiModel):
    id: int
    ts: str = Field(description="UTC, ending in Z")
    actor: str
    action: str
    object_kind: str
    object_id: str
    before: Any = Field(description="the object's state before (JSON), or null")
    after: Any = Field(description="the object's state after (JSON), or null")
    prev_hash: str
    hash: str


class AuditVerifyResponse(ApiModel):
    ok: bool
    events: int
    first_bad_event: int | None = None
    problem: str | None = None


class CheckpointInfo(ApiModel):
    seq: int = Field(description="number in the checkpoint file, from 1")
    ts: str = Field(description="when it was taken (UTC)")
    event_id: int = Field(description="the chain head it anchors")
    event_hash: str
    events: int = Field(description="events up to and including event_id")


class AnchoredVerifyResponse(AuditVerifyResponse):
    checkpoints: int = Field(description="checkpoints whose signature verifies")
    unchained_events: int = Field(default=0, description="events committed but not yet linked into the chain (services/audit_chain.py)")
    anchored_events: int = Field(description="events covered by the last checkpoint")
    unanchored_events: int = Field(description="events written after the last checkpoint: not yet anchored")
    last_checkpoint: CheckpointInfo | None = None
    checkpoint_problem: str | None = Field(default=None, description="the first damaged, deleted or forged checkpoint line")
    bad_checkpoint_line: int | None = None


class CheckpointResponse(CheckpointInfo):
    written: bool = Field(description="false: the head had not moved, this is the last checkpoint")
    file: str = Field(description="the checkpoint file on the server")
