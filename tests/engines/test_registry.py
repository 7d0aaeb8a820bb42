"""The engine registry is a mapping, and each engine's unsupported-feature table is the one
truth about what it refuses: every capability it lacks is there with a reason, and `plan`'s
gaps come from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetpool.catalog.devices import DeviceCatalog
from hetpool.engines.base import CAPABILITY_MIXINS, Backend, ConnectorError, InventoryConnector, capabilities
from hetpool.engines.kubernetes import KubernetesBackend, KubernetesConnector
from hetpool.engines.local import LocalBackend
from hetpool.engines.ray import RayBackend, RayConnector
from hetpool.engines.registry import (
    CONNECTOR_BACKENDS,
    ENGINES,
    backend_class,
    capability_gaps,
    config_problems,
    connector_for,
    make_backend,
    unsupported_features,
)
from hetpool.engines.slurm import SlurmBackend, SlurmConnector

CATALOG = DeviceCatalog.builtin()


def test_every_kind_maps_to_its_engine_package() -> None:
    assert {kind: engine.compute for kind, engine in ENGINES.items()} == {
        "local": LocalBackend,
        "slurm": SlurmBackend,
        "ray": RayBackend,
        "kubernetes": KubernetesBackend,
    }
    assert {kind: engine.inventory for kind, engine in ENGINES.items()} == {
        "local": None,  # host agents report local nodes
        "slurm": SlurmConnector,
        "ray": RayConnector,
        "kubernetes": KubernetesConnector,
    }
    assert set(CONNECTOR_BACKENDS) == {"slurm", "ray", "kubernetes"}
    for kind, engine in ENGINES.items():
        assert engine.kind == kind == engine.compute.kind
        assert backend_class(kind) is engine.compute
        assert issubclass(engine.compute, Backend)
        assert engine.inventory is None or issubclass(engine.inventory, InventoryConnector)


def test_unknown_kinds_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(LookupError, match="unknown backend kind 'nomad'; known: local, slurm, ray, kubernetes"):
        make_backend("nomad", {}, CATALOG, tmp_path)
    with pytest.raises(LookupError, match="nomad"):
        capability_gaps("nomad", {}, {"gang": "x"})
    with pytest.raises(ConnectorError, match="'local' has no inventory connector"):
        connector_for("local", {}, CATALOG)
    assert config_problems("nomad", {}) == []


def test_built_backends_and_connectors_are_the_engine_classes(tmp_path: Path) -> None:
    assert isinstance(make_backend("local", {}, CATALOG, tmp_path / "local"), LocalBackend)
    assert isinstance(make_backend("kubernetes", {"image_default": "busybox"}, CATALOG, tmp_path / "k8s"), KubernetesBackend)
    assert isinstance(connector_for("ray", {"address": "http://head:8265"}, CATALOG), RayConnector)
    assert config_problems("local", {"no_such_key": "1"})[0]["loc"] == "backend_config.no_such_key"


@pytest.mark.parametrize("kind", sorted(ENGINES))
def test_every_missing_capability_is_declared_unsupported_with_a_reason(kind: str) -> None:
    cls = ENGINES[kind].compute
    table = cls.unsupported_features({})
    lacking = {name for name, has in capabilities(cls).items() if not has}
    assert lacking <= set(table), f"{kind}: capabilities without a mixin must be in UNSUPPORTED_FEATURES"
    assert not {name for name, has in capabilities(cls).items() if has} & set(table), f"{kind}: declares and refuses the same feature"
    for feature, limit in table.items():
        assert limit.reason.strip(), f"{kind}: {feature} has no reason"


def test_the_table_drives_plans_gaps() -> None:
    # A capability the engine lacks: the reason names the engine and what the placement needs.
    assert capability_gaps("slurm", {}, {"fractional-devices": "a slice", "gang": "2 nodes"}) == [
        {"capability": "fractional-devices", "reason": "the slurm backend cannot do fractional-devices (a slice)"}
    ]
    assert capability_gaps("local", {}, {"fractional-devices": "a slice", "gang": "2 nodes"}) == []
    # A limit within a declared capability, depending on the cluster's settings.
    needs = {"gang": "3 workers on 2 nodes", "uneven-gang": "a: 2, b: 1"}
    assert capability_gaps("kubernetes", {}, needs) == [
        {
            "capability": "gang",
            "reason": "gang_mode indexed-job needs the same number of workers on every node (a: 2, b: 1); "
            "set backend_config.gang_mode to jobset or volcano",
        }
    ]
    assert capability_gaps("kubernetes", {"gang_mode": "jobset"}, needs) == []
    assert "uneven-gang" in unsupported_features("kubernetes", {"gang_mode": "kueue"})
    assert "uneven-gang" not in unsupported_features("kubernetes", {"gang_mode": "volcano"})
    assert set(CAPABILITY_MIXINS) == {"gang", "log-streaming", "fractional-devices"}
