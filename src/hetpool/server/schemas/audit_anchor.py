"""API bodies of audit checkpoints and of verification against them (services/audit_anchor.py)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from hetpool.server.schemas.bodies import AuditVerifyResponse


class CheckpointInfo(BaseModel):
    seq: int = Field(description="number in the checkpoint file, from 1")
    ts: str = Field(description="when it was taken (UTC)")
    event_id: int = Field(description="the chain head it anchors")
    event_hash: str
    events: int = Field(description="events up to and including event_id")


class AnchoredVerifyResponse(AuditVerifyResponse):
    checkpoints: int = Field(description="checkpoints whose signature verifies")
    anchored_events: int = Field(description="events covered by the last checkpoint")
    unanchored_events: int = Field(description="events written after the last checkpoint: not yet anchored")
    last_checkpoint: CheckpointInfo | None = None
    checkpoint_problem: str | None = Field(default=None, description="the first damaged, deleted or forged checkpoint line")
    bad_checkpoint_line: int | None = None


class CheckpointResponse(CheckpointInfo):
    written: bool = Field(description="false: the head had not moved, this is the last checkpoint")
    file: str = Field(description="the checkpoint file on the server")
