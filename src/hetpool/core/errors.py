"""Errors of the domain, each carrying what a user needs to fix the input."""

from __future__ import annotations


class HetpoolError(Exception):
    """Base of all hetpool errors. `code` is stable and machine-readable."""

    code = "error"

    def __init__(self, message: str, *, details: list[dict] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []

    def to_dict(self) -> dict:
        body: dict = {"code": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body


class SpecError(HetpoolError):
    """A spec failed validation. `details` lists {"loc": "a.b[0]", "msg": ...} entries."""

    code = "invalid_spec"


class NotFoundError(HetpoolError):
    code = "not_found"


class ConflictError(HetpoolError):
    code = "conflict"


class InvalidTransitionError(HetpoolError):
    code = "invalid_transition"


class PermissionDeniedError(HetpoolError):
    code = "permission_denied"


class BackendUnavailableError(HetpoolError):
    """An engine (Slurm, Kubernetes, Ray …) could not be read or reached."""

    code = "backend_unavailable"


class BudgetExceededError(HetpoolError):
    """A budget with a hard stop is spent: no new work for that subtree this period."""

    code = "budget_exceeded"
