"""What every service call needs: the database, the catalog, the clock and the backends."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TypeVar

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.clock import Clock
from hetpool.core.errors import HetpoolError
from hetpool.core.inventory import ClusterSpec
from hetpool.engines.base import Backend
from hetpool.engines.registry import make_backend
from hetpool.server.db.session import Database
from hetpool.server.engine_guard import guarded
from hetpool.server.services.audit_anchor import AuditAnchor
from hetpool.server.settings import Settings

T = TypeVar("T")


@dataclass
class ServiceContext:
    settings: Settings
    db: Database
    clock: Clock = field(default_factory=Clock)
    backends: dict[str, Backend] = field(default_factory=dict)
    # One backend instance per (cluster, kind, backend_config), built on first use.
    _cluster_backends: dict[tuple, Backend] = field(default_factory=dict, init=False, repr=False)
    # What workers and metrics keep between passes (the cluster-state cache, the cost
    # accrual's progress, the worker metrics): one per context, so each server and each
    # test has its own; the owning module names it and says how to build it.
    _process_state: dict[str, object] = field(default_factory=dict, init=False, repr=False)
    _process_state_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    # (fingerprint of the applied CompatibilityRule objects, the KB built with them or None).
    _compat_with_rules: tuple = field(default=((), None), init=False, repr=False)

    def process_state(self, name: str, build: Callable[[], T]) -> T:
        """The state `name` of this process, built on first use (thread-safe)."""
        found = self._process_state.get(name)
        if found is None:
            with self._process_state_lock:
                found = self._process_state.setdefault(name, build())
        return found  # type: ignore[return-value]

    def forget_process_state(self, name: str) -> None:
        """Drop `name` as a restart would (tests of crash recovery use it)."""
        with self._process_state_lock:
            self._process_state.pop(name, None)

    @cached_property
    def builtin_catalog(self) -> DeviceCatalog:
        return DeviceCatalog.builtin()

    @cached_property
    def audit_anchor(self) -> AuditAnchor:
        """The audit checkpoint key and file (services/audit_anchor.py)."""
        return AuditAnchor.from_settings(self.settings)

    @cached_property
    def base_compat(self) -> CompatibilityKB:
        """The built-in tables, the operator's table files, and the unknown policy."""
        kb = CompatibilityKB.builtin().with_policy(self.settings.compat_unknown)
        if self.settings.compat_overrides:
            kb = kb.with_overrides(Path(self.settings.compat_overrides))
        return kb

    @property
    def compat(self) -> CompatibilityKB:
        """The KB with the CompatibilityRule objects the last inventory load found."""
        return self._compat_with_rules[1] or self.base_compat

    def use_compat_rules(self, rules: list) -> None:
        """Rebuild the KB when the applied CompatibilityRule objects changed (load_inventory
        calls this, so every path that reads the inventory checks against current rules).
        A set of rules that no longer merges is logged and left out, never fatal."""
        key = tuple(sorted((r.name, r.model_dump_json()) for r in rules))
        if key == self._compat_with_rules[0]:
            return
        kb = None
        if rules:
            try:
                kb = self.base_compat.with_rows([row for rule in sorted(rules, key=lambda r: r.name) for row in rule.parsed_rows()])
            except HetpoolError as exc:
                logging.getLogger(__name__).error("CompatibilityRule objects left out: %s", exc)
        self._compat_with_rules = (key, kb)

    def backend_for(self, kind: str, cluster: ClusterSpec | None = None) -> Backend:
        """The backend that runs work of `cluster` (a Slurm / Ray / Kubernetes cluster gets
        its own instance, built from its backend_config and kept); the configured instance
        of `kind` when no cluster is given, and for local clusters without a backend_config.
        A local cluster with one (run-as user, limits ...) gets its own instance on the same
        work_dir, so every local job stays findable whichever instance started it."""
        backend = self.backends.get(kind)
        if backend is not None and (cluster is None or (kind == "local" and not cluster.backend_config)):
            return guarded(backend, self.settings.network_in_transaction)
        if cluster is None:
            raise LookupError(f"no '{kind}' backend is configured on this server (configured: {', '.join(self.backends) or 'none'})")
        key = (cluster.name, kind, json.dumps(cluster.backend_config, sort_keys=True))
        cache = self._cluster_backends
        if key not in cache:
            work_dir = self.settings.backend_dir / kind / ("" if kind == "local" else cluster.name)
            cache[key] = make_backend(kind, dict(cluster.backend_config), self.builtin_catalog, work_dir)
        return guarded(cache[key], self.settings.network_in_transaction)
