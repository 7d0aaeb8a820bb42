"""Engine kind -> the engine's descriptor (`base.Engine`): its compute class, how to build it,
its config check and its inventory connector. What an engine can and cannot do lives in its own
package (`Backend.unsupported_features`); nothing here knows one engine from another."""

from __future__ import annotations

from pathlib import Path

from hetpool.catalog.devices import DeviceCatalog
from hetpool.engines import kubernetes, local, ray, slurm
from hetpool.engines.base import Backend, ConnectorError, Engine, InventoryConnector, Unsupported

ENGINES: dict[str, Engine] = {engine.kind: engine for engine in (local.ENGINE, slurm.ENGINE, ray.ENGINE, kubernetes.ENGINE)}
# The kinds whose nodes an inventory connector reads (local nodes come from host agents).
CONNECTOR_BACKENDS = tuple(kind for kind, engine in ENGINES.items() if engine.inventory is not None)


def engine_for(kind: str) -> Engine:
    try:
        return ENGINES[kind]
    except KeyError:
        raise LookupError(f"unknown backend kind {kind!r}; known: {', '.join(ENGINES)}") from None


def make_backend(kind: str, config: dict[str, str], catalog: DeviceCatalog, work_dir: Path) -> Backend:
    """A backend of `kind` built from a cluster's backend_config, keeping its state in work_dir."""
    return engine_for(kind).build(config, catalog, work_dir)


def backend_class(kind: str) -> type[Backend]:
    """The class of a backend kind, to read its declared capabilities without building one."""
    return engine_for(kind).compute


def unsupported_features(kind: str, config: dict[str, str]) -> dict[str, Unsupported]:
    """feature -> why the engine of `kind`, with this backend_config, cannot provide it."""
    return engine_for(kind).compute.unsupported_features(config)


def capability_gaps(kind: str, config: dict[str, str], needs: dict[str, str]) -> list[dict[str, str]]:
    """What a placement needs (feature -> why) that the engine declares unsupported, each with a
    reason a person can act on. Used by `plan`; dispatch would fail on these."""
    limits = unsupported_features(kind, config)
    return [limits[feature].gap(kind, feature, why) for feature, why in needs.items() if feature in limits]


def config_problems(kind: str, config: dict[str, str]) -> list[dict[str, str]]:
    """{"loc": "backend_config.<key>", "msg"} for each unusable setting of a cluster's backend_config,
    checked at `apply` (a 422) so that a bad run-as or security setting never reaches dispatch."""
    engine = ENGINES.get(kind)
    return engine.config_problems(config) if engine is not None else []


def connector_for(backend: str, config: dict[str, str], catalog: DeviceCatalog) -> InventoryConnector:
    """A connector for a Cluster's `backend` built from its `backend_config`."""
    engine = ENGINES.get(backend)
    if engine is None or engine.inventory is None:
        raise ConnectorError(f"backend: {backend!r} has no inventory connector; connectors exist for {', '.join(CONNECTOR_BACKENDS)}")
    return engine.inventory(config, catalog)
