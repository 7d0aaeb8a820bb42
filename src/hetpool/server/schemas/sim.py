"""Bodies of the simulator's inputs from the control plane."""

from __future__ import annotations

from pydantic import Field

from hetpool.server.schemas.common import ApiModel, Document, Number


class TraceLine(ApiModel):
    """One finished task as the simulator replays it (sim/trace.py TraceTask.to_json())."""

    id: str
    arrival_s: Number
    task: Document
    reference_s: Number
    work_s: dict[str, Number] = Field(description="work per device model, in seconds")


class HistoryTrace(ApiModel):
    since: str
    tasks: list[TraceLine]
