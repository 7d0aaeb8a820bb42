"""What every service call needs: the database, the catalog, the clock and the backends."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from hetpool.backends.base import Backend
from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.clock import Clock
from hetpool.server.db.session import Database
from hetpool.server.settings import Settings


@dataclass
class ServiceContext:
    settings: Settings
    db: Database
    clock: Clock = field(default_factory=Clock)
    backends: dict[str, Backend] = field(default_factory=dict)

    @cached_property
    def builtin_catalog(self) -> DeviceCatalog:
        return DeviceCatalog.builtin()

    @cached_property
    def compat(self) -> CompatibilityKB:
        kb = CompatibilityKB.builtin()
        if self.settings.compat_overrides:
            kb = kb.with_overrides(self.settings.compat_overrides.read_text())
        return kb

    def backend_for(self, kind: str) -> Backend:
        backend = self.backends.get(kind)
        if backend is None:
            raise LookupError(f"no '{kind}' backend is configured on this server (configured: {', '.join(self.backends) or 'none'})")
        return backend
