"""Server settings from the environment (HETPOOL_*) and command-line flags."""

from __future__ import annotations

from pathlib import Path

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
    max_request_bytes: int = 4 * 1024 * 1024
    connector_sync_interval_s: float = Field(default=30.0, gt=0, description="how often Slurm / Kubernetes / Ray clusters are re-read")
    run_connector_sync: bool = Field(default=True, description="run the periodic connector sync thread")
    heartbeat_timeout_s: float = Field(default=30.0, gt=0, description="a node whose agent is silent this long is offline")
    # OIDC bearer tokens (JWTs) are accepted only when an issuer is set; the user must exist in hetpool.
    oidc_issuer: str = Field(default="", description="expected 'iss' of OIDC bearer tokens; empty: OIDC off")
    oidc_audience: str = Field(default="", description="expected 'aud'; required with an issuer (else tokens minted for other apps would pass)")
    oidc_jwks: str = Field(default="", description="the issuer's JWKS: a file path or an https URL")
    oidc_username_claim: str = Field(default="preferred_username", description="claim naming the hetpool user")

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'hetpool.db'}"

    @property
    def backend_dir(self) -> Path:
        return self.data_dir / "backends"
