"""The Slurm engine's backend_config keys shared by its client, compute and inventory.

Keys (all strings): `conf` (slurm.conf, passed as SLURM_CONF), `bin_dir` (where the Slurm
commands are; default: PATH), `timeout_s` (per command, default 15), `gres_models`
(GRES -> catalog model overrides, `name:type=model` pairs; `name=model` for untyped GRES).
The compute side adds partition / account / qos / node_prefix and the run-as keys (runas.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from hetpool.catalog.devices import DeviceCatalog

DEFAULT_TIMEOUT_S = 15.0


class SlurmPlanError(ValueError):
    """The request cannot be expressed as a Slurm job on this cluster (names, GRES, shape),
    or the GRES mapping of backend_config is unusable."""


@dataclass(frozen=True)
class SlurmAccess:
    """How to reach slurmctld: what every Slurm command of hetpool needs."""

    conf: str = ""
    bin_dir: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def from_config(cls, config: dict[str, str]) -> SlurmAccess:
        """Raises ValueError naming `timeout_s` when it is not a number."""
        try:
            timeout_s = float(config.get("timeout_s") or DEFAULT_TIMEOUT_S)
        except ValueError:
            raise ValueError(f"slurm: timeout_s {config.get('timeout_s')!r} is not a number") from None
        return cls(conf=config.get("conf", "").strip(), bin_dir=config.get("bin_dir", "").strip(), timeout_s=timeout_s)


def parse_overrides(text: str) -> dict[str, str]:
    """backend_config `gres_models` (`gpu:a100=nvidia-a100-80g,gpu=nvidia-t4`) -> {"gpu:a100": model, "gpu:": model} (keys lower-case)."""
    overrides: dict[str, str] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, model = item.partition("=")
        key, model = key.strip().lower(), model.strip()
        if not sep or not key or not model:
            raise SlurmPlanError(f"slurm: gres_models entry {item.strip()!r} is not 'name:type=model'")
        # model_for_gres looks untyped GRES up as "gpu:".
        overrides[key if ":" in key else f"{key}:"] = model
    return overrides


def gres_overrides(config: dict[str, str], catalog: DeviceCatalog) -> dict[str, str]:
    """The parsed `gres_models`, every model checked against the catalog (ValueError otherwise)."""
    overrides = parse_overrides(config.get("gres_models", ""))
    missing = sorted({m for m in overrides.values() if m not in catalog})
    if missing:
        raise SlurmPlanError(f"slurm: gres_models maps to models the catalog does not have: {', '.join(missing)}")
    return overrides
