"""Server settings from the environment (HETPOOL_*) and command-line flags."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


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
    compat_overrides: Path | None = None
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

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'hetpool.db'}"

    @property
    def backend_dir(self) -> Path:
        return self.data_dir / "backends"
