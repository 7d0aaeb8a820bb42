"""What every API body shares: the base of response models and the one error model.

Schemas modules import only pydantic, the standard library and hetpool.core: the client,
the CLI and the dashboard parse responses with them and must not pull in FastAPI or
SQLAlchemy (tests/test_layers.py)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

# A count or an amount the server writes as given: an int stays an int on the wire
# (a plain `float` field would turn 5 into 5.0 and change what the CLI prints).
Number = int | float
# An object document (kind: + fields) as stored and shown: its shape is the kind's spec (core/).
Document = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "type": "object",
            "description": "an object document: kind, name and the kind's fields (the specs of hetpool.core)",
            "properties": {"kind": {"type": "string"}, "name": {"type": "string"}},
            "additionalProperties": True,
        }
    ),
]


class ApiModel(BaseModel):
    """Base of response bodies. extra="forbid": a key the server adds without declaring it
    fails response validation (a 500 in the tests) instead of reaching clients undescribed."""

    model_config = ConfigDict(extra="forbid")


class RequestModel(BaseModel):
    """Base of request bodies: an unknown field is a 422 that names it."""

    model_config = ConfigDict(extra="forbid")


class ErrorResponse(ApiModel):
    """Every 4xx and 5xx answer of the API, whoever produced it (a service's HetpoolError,
    request validation, authentication, the security and rate-limit middleware)."""

    code: str = Field(description="stable, machine-readable: invalid_spec, not_found, conflict, permission_denied, unauthorized …")
    message: str = Field(description="what is wrong, for a person")
    details: list[dict[str, Any]] = Field(default=[], description="per problem, usually {loc, msg}: the field and what is wrong with it")


_ERROR_CODES = {
    400: "Bad request",
    401: "Not signed in: no token, or an unknown, expired or revoked one",
    403: "Not allowed (permission_denied, separation_of_duties, budget_exceeded …)",
    404: "Not found, or not visible to the caller",
    409: "Conflict with the current state",
    413: "Request body too large",
    422: "Invalid request or spec; details name the fields",
    429: "Rate limited; Retry-After says when to retry",
}

# The `responses=` of every router: the error codes and their one body, in the OpenAPI schema.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {code: {"model": ErrorResponse, "description": text} for code, text in _ERROR_CODES.items()}
ENGINE_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    502: {"model": ErrorResponse, "description": "The engine (Slurm, Ray, Kubernetes) did not answer"}
}
