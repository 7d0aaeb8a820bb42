"""A task's goal: what the user wants done, not which hardware does it.

A goal names the model (from the built-in table, catalog/data/models.yaml, or by size:
`params: 13B`), the method (pretrain, full-finetune, lora, qlora, inference,
batch-inference), the precision, the work (sequence length, batch, tokens) and targets: a
deadline, a throughput or latency goal, a cost ceiling. `catalog/sizing.py` turns it into
memory per device and a device count per device model; the recommendation service ranks
the options. A goal with only targets (no model) carries a deadline or cost ceiling for a
task that sizes itself.

Every number is bounded (core/limits.py): the sizing arithmetic runs on what a member
writes, and a huge figure must be refused here, not loop or overflow later.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import Field, field_validator, model_validator

from hetpool.core.base import Name, SpecModel
from hetpool.core.limits import DAY_S, MAX_DURATION_S, bounded
from hetpool.core.units import parse_duration

MAX_PARAMS = 100e12  # 100T parameters: 50x today's largest open model
MAX_TOKENS = 1e15  # tokens of one job (Llama 3 was trained on 15.6e12)
MAX_SEQ_LEN = 10_485_760  # 10M tokens of context
MAX_BATCH = 65_536
MAX_COST = 1e9
MAX_TOKENS_PER_S = 1e9
MAX_LATENCY_MS = 3_600_000.0


class Method(StrEnum):
    PRETRAIN = "pretrain"
    FULL_FINETUNE = "full-finetune"
    LORA = "lora"
    QLORA = "qlora"
    INFERENCE = "inference"
    BATCH_INFERENCE = "batch-inference"

    @property
    def trains(self) -> bool:
        return self in (Method.PRETRAIN, Method.FULL_FINETUNE, Method.LORA, Method.QLORA)

    @property
    def task_type(self) -> str:
        """The task type (core.inventory.TaskType value) whose performance figures apply."""
        return {Method.INFERENCE: "inference", Method.BATCH_INFERENCE: "batch-inference"}.get(self, "training")


class Precision(StrEnum):
    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"

    @property
    def bytes_per_value(self) -> float:
        return {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}[self.value]

    @property
    def feature(self) -> str | None:
        """The device feature (catalog `features`) this precision needs, if any."""
        return {"bf16": "bf16", "fp8": "fp8", "int8": "int8"}.get(self.value)


_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_COUNT = re.compile(r"(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmbgt]?)")


def parse_count(value: Any, what: str, limit: float) -> float:
    """A count written by a person: 2e9, "2e9", "2B", "13B", "350M", "1.5T" (B and G
    both mean 1e9). Positive, finite and at most `limit`."""
    if isinstance(value, bool):
        raise ValueError(f"expected a {what} such as 2e9 or '13B'")
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        match = _COUNT.fullmatch(str(value).strip().lower().replace("_", ""))
        if not match:
            raise ValueError(f"{str(value)[:40]!r} is not a count; use e.g. 2e9, '13B', '350M'")
        number = float(match.group(1)) * _SCALE[match.group(2)]
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{what} must be a positive number")
    if number > limit:
        raise ValueError(f"{number:.3g} {what} is above the limit of {limit:.3g}")
    return number


class GoalFields(SpecModel):
    """A goal's fields, each checked on its own: what a template may preset (a template's
    goal may give the method without a model)."""

    model: Name | None = Field(default=None, description="a model of the built-in table, e.g. llama3.1-8b, qwen2.5-72b")
    params: bounded(gt=0, le=MAX_PARAMS) | None = Field(default=None, description="parameters when the model is not in the table: 13B, 7e9, 350M")
    method: Method | None = Field(default=None, description="pretrain, full-finetune, lora, qlora, inference, batch-inference")
    precision: Precision = Field(default=Precision.BF16, description="fp32, bf16, fp16, fp8, int8, int4 (weights and compute)")
    seq_len: bounded(gt=0, le=MAX_SEQ_LEN, kind=int) = Field(default=4096, description="tokens per sequence")
    batch_size: bounded(gt=0, le=MAX_BATCH, kind=int) | None = Field(
        default=None, description="sequences per device step (training micro-batch) or concurrent requests per replica (inference)"
    )
    tokens: bounded(gt=0, le=MAX_TOKENS) | None = Field(default=None, description="tokens to process in all (training: over all epochs); 2e9 or '2B'")
    dataset_size_gb: bounded(gt=0, le=1e9) | None = Field(default=None, description="dataset size, GB (informational)")
    lora_rank: bounded(gt=0, le=4096, kind=int) = Field(default=16, description="LoRA / QLoRA adapter rank")
    deadline: str | None = Field(default=None, description="finish within a duration ('48h') or by a time (ISO 8601 with a zone)")
    max_cost: bounded(gt=0, le=MAX_COST) | None = Field(default=None, description="cost ceiling, in the pools' price unit")
    throughput_tokens_per_s: bounded(gt=0, le=MAX_TOKENS_PER_S) | None = Field(default=None, description="generated tokens/s, all replicas")
    latency_ms: bounded(gt=0, le=MAX_LATENCY_MS) | None = Field(default=None, description="time per generated token of one request, ms")

    @field_validator("params", mode="before")
    @classmethod
    def _params(cls, value: Any) -> float | None:
        return None if value is None else parse_count(value, "params", MAX_PARAMS)

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens(cls, value: Any) -> float | None:
        return None if value is None else parse_count(value, "tokens", MAX_TOKENS)

    @field_validator("deadline", mode="before")
    @classmethod
    def _deadline(cls, value: Any) -> str | None:
        if value is None:
            return None
        if isinstance(value, datetime):
            return _aware(value).isoformat()
        text = str(value).strip()
        if _looks_like_time(text):
            try:
                when = datetime.fromisoformat(text)
            except ValueError:
                raise ValueError(f"{text[:40]!r} is not an ISO 8601 time; use e.g. '2026-12-04T18:00:00+08:00' or '48h'") from None
            _aware(when)
            return text
        parse_duration(text, max_s=MAX_DURATION_S)
        return text


class Goal(GoalFields):
    """What the task is for. `model` or `params` says what is run; `method` how."""

    @model_validator(mode="after")
    def _what_is_run(self) -> Goal:
        if self.model and self.params:
            raise ValueError("goal: give either 'model' (a name of the table) or 'params', not both")
        if (self.model or self.params) and self.method is None:
            raise ValueError("goal.method: required with a model; one of " + ", ".join(m.value for m in Method))
        if self.method is not None and not (self.model or self.params):
            raise ValueError("goal: a method needs 'model' (a name of the table) or 'params' (e.g. 13B)")
        if self.method in (Method.LORA, Method.QLORA) and self.precision in (Precision.INT4, Precision.INT8):
            raise ValueError("goal.precision: LoRA trains in fp32, bf16, fp16 or fp8 (QLoRA's 4-bit base is implied by method: qlora)")
        return self

    @property
    def sizes(self) -> bool:
        """Whether the goal says enough to size the task (a model and a method)."""
        return self.method is not None and bool(self.model or self.params)

    def deadline_at(self, submitted: datetime) -> datetime | None:
        """The deadline as a time: a duration counts from `submitted`."""
        if self.deadline is None:
            return None
        if _looks_like_time(self.deadline):
            return _aware(datetime.fromisoformat(self.deadline))
        return submitted + timedelta(seconds=parse_duration(self.deadline, max_s=MAX_DURATION_S))


def _looks_like_time(text: str) -> bool:
    return bool(re.match(r"\d{4}-\d{2}-\d{2}", text))


def _aware(when: datetime) -> datetime:
    if when.tzinfo is None:
        raise ValueError("a time needs its zone (e.g. '+08:00' or 'Z')")
    if abs((when - datetime(2000, 1, 1, tzinfo=UTC)).total_seconds()) > 200 * 365 * DAY_S:
        raise ValueError("the time is out of range")
    return when.astimezone(UTC)
