"""No engine call inside a database transaction.

An engine call can take seconds (`sbatch` against a busy controller, a Ray head that is
restarting); made inside a transaction it holds the transaction's locks — on SQLite the
whole database's write lock — and a pooled connection for that long, so every API request
behind it waits. The workers therefore load in one transaction, call the engine with none
open, and record in another (dstack's load → process → apply).

This module enforces it: `ServiceContext.backend_for` hands out each backend wrapped in a
`GuardedBackend`, whose engine calls (submit, find, poll, cancel, logs) first ask
server/db/session.py whether this thread has a transaction open. With the setting
`network_in_transaction = "raise"` (the test suite sets it: tests/conftest.py) such a call
raises NetworkInTransactionError; with "warn" (the default) it is logged with its stack
and goes ahead, so a path no test covers degrades instead of failing a request.
"""

from __future__ import annotations

import functools
import logging

from hetpool.engines.base import Backend
from hetpool.server.db.session import in_transaction

log = logging.getLogger(__name__)

# The Backend methods that reach the engine (engines/base.py).
ENGINE_CALLS = frozenset({"submit", "find", "poll", "cancel", "logs"})


class NetworkInTransactionError(RuntimeError):
    """An engine was called while this thread held a database transaction open."""


class GuardedBackend:
    """`backend`, with its engine calls refused (or logged) inside a transaction. Every
    other attribute is the backend's own."""

    def __init__(self, backend: Backend, mode: str) -> None:
        self.wrapped = backend
        self._mode = mode

    def __getattr__(self, name: str):
        attr = getattr(self.wrapped, name)
        if name not in ENGINE_CALLS:
            return attr

        @functools.wraps(attr)
        def guarded(*args, **kwargs):
            if in_transaction():
                what = f"{type(self.wrapped).__name__}.{name} called inside a database transaction (server/engine_guard.py)"
                if self._mode == "raise":
                    raise NetworkInTransactionError(what)
                log.error("%s", what, stack_info=True)
            return attr(*args, **kwargs)

        return guarded


def guarded(backend: Backend, mode: str) -> Backend:
    return backend if isinstance(backend, GuardedBackend) else GuardedBackend(backend, mode)  # type: ignore[return-value]
