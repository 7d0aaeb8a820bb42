"""The Ray engine's backend_config, shared by compute and inventory (all values are strings):

  address            the dashboard URL, e.g. "http://127.0.0.1:8265" (required)
  resource_models    "GPU_A100=nvidia-a100-80g,NPU=ascend-910b3": Ray resource -> catalog model
                     overrides (keys matched case-insensitively; resources.py)
  token              optional; sent as "Authorization: Bearer <token>" (Ray's token authentication)
  timeout_s          per-request timeout in seconds (default "10")

compute.py adds pending_timeout_s, request_memory, pin_nodes and env_passthrough.
"""

from __future__ import annotations

from hetpool.engines.base import ConnectorError
from hetpool.engines.ray.environment import parse_passthrough


class RayConfigError(ConnectorError, ValueError):
    """A Ray backend_config value is unusable: a ValueError where a backend is built, a
    ConnectorError where the inventory is synced."""


def dashboard_address(config: dict[str, str]) -> str:
    """The dashboard's base URL (http:// added when no scheme is given)."""
    address = str(config.get("address", "")).strip().rstrip("/")
    if not address:
        raise RayConfigError("ray: backend_config.address (the dashboard URL, e.g. http://head:8265) is required")
    return address if "://" in address else "http://" + address


def auth_headers(config: dict[str, str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {config['token']}"} if config.get("token") else {}


def flag(config: dict[str, str], key: str, default: bool) -> bool:
    value = str(config.get(key, "")).strip().lower()
    if not value:
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise RayConfigError(f"ray: backend_config.{key} {config[key]!r} is not true/false")


def number(config: dict[str, str], key: str, default: float) -> float:
    try:
        value = float(config.get(key) or default)
    except ValueError:
        raise RayConfigError(f"ray: backend_config.{key} {config.get(key)!r} is not a number") from None
    if value <= 0:
        raise RayConfigError(f"ray: backend_config.{key} must be > 0")
    return value


def config_problems(config: dict[str, str]) -> list[dict[str, str]]:
    """Unusable settings of a Ray backend_config, {"loc", "msg"} each (apply answers 422)."""
    try:
        parse_passthrough(str(config.get("env_passthrough") or ""))
    except ValueError as exc:
        return [{"loc": "backend_config.env_passthrough", "msg": str(exc).split(": ", 2)[-1]}]
    return []


def parse_resource_models(text: str) -> dict[str, str]:
    """ "GPU_A100=nvidia-a100-80g, NPU=ascend-910b3" -> {"GPU_A100": ..., "NPU": ...} (names as written)."""
    out: dict[str, str] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, sep, model = part.partition("=")
        if not sep or not key.strip() or not model.strip():
            raise RayConfigError(f"ray: resource_models entry {part.strip()!r} is not RESOURCE=MODEL")
        out[key.strip()] = model.strip()
    return out
