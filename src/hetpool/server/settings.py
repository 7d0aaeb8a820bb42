"""Server settings from the environment (HETPOOL_*) and command-line flags."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The worker pipelines, each its own thread (server/workers/loop.py).
PIPELINES = ("schedule", "dispatch", "reconcile", "reclaim", "cost", "housekeeping")


def default_data_dir() -> Path:
    return Path.home() / ".hetpool"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HETPOOL_", extra="ignore")

    data_dir: Path = Field(default_factory=default_data_dir)
    database_url: str = Field(default="", description="defaults to SQLite in data_dir")
    host: str = "127.0.0.1"
    port: int = 8080
    run_workers: bool = True
    worker_interval_s: float = 0.5
    # Worker pipelines (server/workers/loop.py, docs/operations.md#pipeline-layout): each runs
    # in its own thread, every `worker_interval_s` unless overridden here, taking at most
    # `worker_batch` rows per round unless overridden; dispatch runs `dispatch_concurrency`
    # submits at once per (cluster, backend), or the backend kind's own figure.
    pipeline_interval_s: dict[str, float] = Field(default_factory=dict, description='per pipeline, e.g. {"reconcile": 2.0}')
    worker_batch: int = Field(default=500, ge=1, le=100_000, description="rows a pipeline takes per round")
    pipeline_batch: dict[str, int] = Field(default_factory=dict, description='per pipeline, e.g. {"dispatch": 100}')
    dispatch_concurrency: int = Field(default=4, ge=1, le=256, description="submits at once per (cluster, backend)")
    dispatch_concurrency_per_backend: dict[str, int] = Field(default_factory=dict, description='per backend kind, e.g. {"slurm": 8}')
    network_in_transaction: Literal["raise", "warn"] = Field(
        default="warn", description="an engine call inside a database transaction: raise (tests) or log it (server/engine_guard.py)"
    )
    compat_overrides: Path | None = Field(
        default=None, description="a compatibility table file, or a directory of them, whose rows replace or extend the built-in tables"
    )
    compat_unknown: Literal["block", "allow"] = Field(
        default="block", description="a framework, runtime or release the compatibility tables do not cover: block the pool, or allow it with a note"
    )
    max_checkpoint_grace_s: float = Field(
        default=600.0,
        ge=1,
        le=3600,
        description="a task's checkpoint grace is cut to this: how long a preemptor, a migration or a reclaim waits at most for the devices",
    )
    max_request_bytes: int = Field(default=4 * 1024 * 1024, gt=0, description="larger request bodies (also chunked ones) get 413")
    # HTTP hardening (server/security.py, server/ratelimit.py; docs/operations-security.md).
    cors_origins: str = Field(default="", description="comma-separated origins allowed cross-origin (CORS); empty: closed")
    rate_limit_per_s: float = Field(default=100.0, ge=0, description="sustained /api/ requests per second per token; 0: no limit")
    rate_limit_burst: int = Field(default=1000, ge=1, description="requests a token may send at once before the rate applies")
    log_format: Literal["text", "json"] = Field(default="text", description="json: one object per line (server/logging_setup.py)")
    log_level: Literal["debug", "info", "warning", "error"] = Field(default="info", description="level of the server's own logs")
    tracing: Literal["off", "console", "otlp"] = Field(
        default="off", description="OpenTelemetry spans per task (server/tracing.py; needs hetpool[tracing]); otlp reads OTEL_EXPORTER_OTLP_*"
    )
    connector_sync_interval_s: float = Field(default=30.0, gt=0, description="how often Slurm / Kubernetes / Ray clusters are re-read")
    run_connector_sync: bool = Field(default=True, description="run the periodic connector sync thread")
    heartbeat_timeout_s: float = Field(default=30.0, gt=0, description="a node whose agent is silent this long is offline")
    # Leader election of the background loops (server/leader.py); renew must be well under the lease.
    leader_lease_s: float = Field(default=10.0, gt=0, description="a leader silent this long is replaced by a standby replica")
    leader_renew_s: float = Field(default=3.0, gt=0, description="how often the leader renews its lease and a standby tries to take it")
    # OIDC bearer tokens (JWTs) are accepted only when an issuer is set; the user must exist in hetpool.
    oidc_issuer: str = Field(default="", description="expected 'iss' of OIDC bearer tokens; empty: OIDC off")
    oidc_audience: str = Field(default="", description="expected 'aud'; required with an issuer (else tokens minted for other apps would pass)")
    oidc_jwks: str = Field(default="", description="the issuer's JWKS: a file path or an https URL")
    oidc_username_claim: str = Field(default="preferred_username", description="claim naming the hetpool user")
    # Dashboard sessions (services/web_sessions.py): ended by sign-out, by the token they were made from, or by these.
    web_session_idle_s: float = Field(default=8 * 3600.0, gt=0, le=366 * 86400, description="a dashboard session unused this long ends")
    web_session_max_s: float = Field(default=7 * 86400.0, gt=0, le=366 * 86400, description="a dashboard session ends this long after sign-in")
    # Audit checkpoints under a key outside the database (services/audit_anchor.py, docs/governance.md#audit).
    audit_key_file: Path | None = Field(default=None, description="checkpoint HMAC key, mode 600; default data_dir/audit.key, made at first start")
    audit_checkpoint_file: Path | None = Field(default=None, description="append-only checkpoint file; default data_dir/audit-checkpoints.jsonl")
    audit_checkpoint_interval_s: float = Field(default=60.0, gt=0, le=86400, description="how often the leader checkpoints the audit chain head")

    @field_validator("pipeline_interval_s", "pipeline_batch")
    @classmethod
    def _known_pipelines(cls, value: dict) -> dict:
        unknown = sorted(set(value) - set(PIPELINES))
        if unknown:
            raise ValueError(f"unknown pipeline {', '.join(unknown)}; the pipelines are {', '.join(PIPELINES)}")
        bad = sorted(name for name, v in value.items() if not 0 < v <= 100_000)
        if bad:
            raise ValueError(f"{', '.join(bad)}: must be more than 0 and at most 100000")
        return value

    @field_validator("dispatch_concurrency_per_backend")
    @classmethod
    def _sane_concurrency(cls, value: dict[str, int]) -> dict[str, int]:
        bad = sorted(kind for kind, n in value.items() if not 1 <= n <= 256)
        if bad:
            raise ValueError(f"{', '.join(bad)}: concurrency must be between 1 and 256")
        return value

    def interval_of(self, pipeline: str) -> float:
        return self.pipeline_interval_s.get(pipeline, self.worker_interval_s)

    def batch_of(self, pipeline: str) -> int:
        return self.pipeline_batch.get(pipeline, self.worker_batch)

    def dispatch_concurrency_of(self, backend_kind: str) -> int:
        return self.dispatch_concurrency_per_backend.get(backend_kind, self.dispatch_concurrency)

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'hetpool.db'}"

    @property
    def backend_dir(self) -> Path:
        return self.data_dir / "backends"
