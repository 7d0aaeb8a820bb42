"""HTTP client for /api/v1. Errors come back as `ApiError` with the server's code and details.

Answers are parsed into the server's own response models (hetpool.server.schemas, which
import only pydantic and hetpool.core): a server whose answers drift from its declared
contract fails here, in a test, rather than in a command's output. Object documents
(`kind:` + fields) stay dicts: their shape is the kind's spec."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
from pydantic import TypeAdapter

from hetpool.server.schemas.agent import HeartbeatResponse, NodeStatus, RegisterResponse
from hetpool.server.schemas.approvals import ApprovalResponse
from hetpool.server.schemas.audit import AnchoredVerifyResponse, AuditEvent, CheckpointResponse
from hetpool.server.schemas.common import ErrorResponse
from hetpool.server.schemas.compat import CompatCheckResponse, CompatMatrixResponse, CompatRowResponse
from hetpool.server.schemas.connectors import ConnectorSync, SyncResult
from hetpool.server.schemas.cost import BudgetStatus, CostReport, Ledger
from hetpool.server.schemas.inventory import ApplyResponse, ApplyResult, HeldChange, PoolProfile
from hetpool.server.schemas.meta import HealthResponse
from hetpool.server.schemas.quotas import QuotaUsage
from hetpool.server.schemas.sim import HistoryTrace, TraceLine
from hetpool.server.schemas.tasks import LogsResponse, PlanResponse, RecommendResponse, TaskResponse
from hetpool.server.schemas.users import NewTokenResponse, TokenResponse, UserResponse, WhoamiResponse


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, details: list[dict] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or []


def _parse(model: Any, body: Any) -> Any:
    return TypeAdapter(model).validate_python(body)


class HetpoolClient:
    def __init__(self, url: str, token: str | None, *, timeout: float = 30.0, transport: httpx.BaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HetpoolClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.ConnectError as exc:
            raise ApiError(0, "unreachable", f"cannot reach the hetpool server at {self._http.base_url}: {exc}") from None
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = {"message": response.text[:500]}
            if isinstance(body, dict) and "code" in body and "message" in body:
                error = ErrorResponse.model_validate(body)
                raise ApiError(response.status_code, error.code, error.message, error.details)
            raise ApiError(response.status_code, body.get("code", "error"), body.get("message") or str(body.get("detail", "")), body.get("details"))
        if response.status_code == 204:
            return None
        return response.json()

    # -- objects ---------------------------------------------------------------
    def apply(self, documents: list[dict], sources: list[str] | None = None) -> list[ApplyResult]:
        return ApplyResponse.model_validate(self._request("POST", "/api/v1/apply", json={"documents": documents, "sources": sources})).results

    def list_objects(self, kind: str) -> list[dict]:
        return self._request("GET", f"/api/v1/objects/{kind}")

    def get_object(self, kind: str, name: str) -> dict:
        return self._request("GET", f"/api/v1/objects/{kind}/{name}")

    def delete_object(self, kind: str, name: str) -> HeldChange | None:
        """None when deleted; the approval request when a policy holds the delete (202)."""
        held = self._request("DELETE", f"/api/v1/objects/{kind}/{name}")
        return None if held is None else HeldChange.model_validate(held)

    # -- tasks -----------------------------------------------------------------
    def plan(self, task: dict) -> PlanResponse:
        return PlanResponse.model_validate(self._request("POST", "/api/v1/tasks/plan", json=task))

    def compat_check(self, query: dict) -> CompatCheckResponse:
        return CompatCheckResponse.model_validate(self._request("POST", "/api/v1/compat/check", json=query))

    def compat_matrix(self, device: str | None = None, framework: str | None = None) -> CompatMatrixResponse:
        params = {k: v for k, v in {"device": device, "framework": framework}.items() if v}
        return CompatMatrixResponse.model_validate(self._request("GET", "/api/v1/compat/matrix", params=params))

    def compat_rows(self, table: str | None = None, origin: str | None = None) -> list[CompatRowResponse]:
        params = {k: v for k, v in {"table": table, "origin": origin}.items() if v}
        return _parse(list[CompatRowResponse], self._request("GET", "/api/v1/compat/rows", params=params))

    def recommend(self, task: dict) -> RecommendResponse:
        return RecommendResponse.model_validate(self._request("POST", "/api/v1/tasks/recommend", json=task))

    def submit(self, task: dict, idempotency_key: str | None = None, retries: int = 1) -> TaskResponse:
        """With a key, a lost connection is retried (`retries` times) with the same key:
        the server returns the task a first attempt may have created instead of a second."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        for attempt in range(retries + 1 if idempotency_key else 1):
            try:
                return TaskResponse.model_validate(self._request("POST", "/api/v1/tasks", json=task, headers=headers))
            except (httpx.TransportError, ApiError) as exc:
                lost = isinstance(exc, httpx.TransportError) or exc.status == 0
                if not lost or attempt == retries:
                    raise
        raise AssertionError("unreachable")

    def list_tasks(self, state: str | None = None, tenant: str | None = None) -> list[TaskResponse]:
        params = {k: v for k, v in {"state": state, "tenant": tenant}.items() if v}
        return _parse(list[TaskResponse], self._request("GET", "/api/v1/tasks", params=params))

    def get_task(self, task_id: str) -> TaskResponse:
        return TaskResponse.model_validate(self._request("GET", f"/api/v1/tasks/{task_id}"))

    def cancel(self, task_id: str) -> TaskResponse:
        return TaskResponse.model_validate(self._request("POST", f"/api/v1/tasks/{task_id}/cancel"))

    def logs(self, task_id: str, rank: int = 0, offset: int = 0) -> LogsResponse:
        return LogsResponse.model_validate(self._request("GET", f"/api/v1/tasks/{task_id}/logs", params={"rank": rank, "offset": offset}))

    # -- audit -----------------------------------------------------------------
    def audit_events(self, **filters: Any) -> list[AuditEvent]:
        return _parse(list[AuditEvent], self._request("GET", "/api/v1/audit", params={k: v for k, v in filters.items() if v is not None}))

    def audit_verify(self) -> AnchoredVerifyResponse:
        return AnchoredVerifyResponse.model_validate(self._request("GET", "/api/v1/audit/verify"))

    def audit_checkpoint(self) -> CheckpointResponse:
        return CheckpointResponse.model_validate(self._request("POST", "/api/v1/audit/checkpoints"))

    def audit_export(self, fmt: str = "jsonl", **filters: Any) -> Iterator[bytes]:
        """The export as it streams in (JSON lines or CSV), filtered like `audit_events`."""
        params = {"format": fmt, **{k: v for k, v in filters.items() if v is not None}}
        try:
            with self._http.stream("GET", "/api/v1/audit/export", params=params) as response:
                if response.status_code >= 400:
                    response.read()
                    body = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
                    raise ApiError(response.status_code, body.get("code", "error"), body.get("message") or response.text[:500], body.get("details"))
                yield from response.iter_bytes()
        except httpx.ConnectError as exc:
            raise ApiError(0, "unreachable", f"cannot reach the hetpool server at {self._http.base_url}: {exc}") from None

    # -- simulation --------------------------------------------------------------
    def history_trace(self, days: float = 30) -> list[TraceLine]:
        """Finished tasks of the last `days` days as trace lines (TraceTask.to_json())."""
        return HistoryTrace.model_validate(self._request("GET", "/api/v1/sim/history", params={"days": days})).tasks

    # -- agents ----------------------------------------------------------------
    def register_node(self, node: dict, pool: str | None, agent_version: str, models: list[dict] | None = None) -> RegisterResponse:
        body = {"node": node, "pool": pool, "agent_version": agent_version, "models": models or []}
        return RegisterResponse.model_validate(self._request("POST", "/api/v1/agent/register", json=body))

    def heartbeat(self, node: str, devices: list[dict], agent_version: str) -> HeartbeatResponse:
        body = {"node": node, "devices": devices, "agent_version": agent_version}
        return HeartbeatResponse.model_validate(self._request("POST", "/api/v1/agent/heartbeat", json=body))

    def quota_usage(self) -> list[QuotaUsage]:
        return _parse(list[QuotaUsage], self._request("GET", "/api/v1/quotas/usage"))

    def pool_profile(self, name: str) -> PoolProfile:
        return PoolProfile.model_validate(self._request("GET", f"/api/v1/pools/{name}/profile"))

    def sync_cluster(self, name: str) -> SyncResult:
        return SyncResult.model_validate(self._request("POST", f"/api/v1/clusters/{name}/sync"))

    def connector_syncs(self) -> list[ConnectorSync]:
        return _parse(list[ConnectorSync], self._request("GET", "/api/v1/connectors"))

    def node_status(self) -> list[NodeStatus]:
        return _parse(list[NodeStatus], self._request("GET", "/api/v1/nodes/status"))

    def health(self) -> HealthResponse:
        return HealthResponse.model_validate(self._request("GET", "/healthz"))

    # -- approvals -------------------------------------------------------------
    def list_approvals(self, state: str | None = None) -> list[ApprovalResponse]:
        return _parse(list[ApprovalResponse], self._request("GET", "/api/v1/approvals", params={"state": state} if state else {}))

    def get_approval(self, approval_id: str) -> ApprovalResponse:
        return ApprovalResponse.model_validate(self._request("GET", f"/api/v1/approvals/{approval_id}"))

    def decide_approval(self, approval_id: str, *, approve: bool, comment: str = "") -> ApprovalResponse:
        path = f"/api/v1/approvals/{approval_id}/{'approve' if approve else 'reject'}"
        return ApprovalResponse.model_validate(self._request("POST", path, json={"comment": comment}))

    # -- users and tokens --------------------------------------------------------
    def whoami(self) -> WhoamiResponse:
        return WhoamiResponse.model_validate(self._request("GET", "/api/v1/whoami"))

    def create_user(self, name: str, bindings: list[dict]) -> UserResponse:
        return UserResponse.model_validate(self._request("POST", "/api/v1/users", json={"name": name, "bindings": bindings}))

    def list_users(self) -> list[UserResponse]:
        return _parse(list[UserResponse], self._request("GET", "/api/v1/users"))

    def get_user(self, name: str) -> UserResponse:
        return UserResponse.model_validate(self._request("GET", f"/api/v1/users/{name}"))

    def delete_user(self, name: str) -> None:
        self._request("DELETE", f"/api/v1/users/{name}")

    def add_bindings(self, name: str, bindings: list[dict]) -> UserResponse:
        return UserResponse.model_validate(self._request("POST", f"/api/v1/users/{name}/bindings", json={"bindings": bindings}))

    def remove_binding(self, name: str, role: str, tenant: str | None) -> UserResponse:
        params = {"role": role, **({"tenant": tenant} if tenant else {})}
        return UserResponse.model_validate(self._request("DELETE", f"/api/v1/users/{name}/bindings", params=params))

    def create_token(self, user: str | None = None, label: str = "", expires_in: str | None = None) -> NewTokenResponse:
        body = {"label": label, **({"expires_in": expires_in} if expires_in else {})}
        return NewTokenResponse.model_validate(self._request("POST", f"/api/v1/users/{user}/tokens" if user else "/api/v1/tokens", json=body))

    def list_tokens(self, user: str | None = None) -> list[TokenResponse]:
        return _parse(list[TokenResponse], self._request("GET", f"/api/v1/users/{user}/tokens" if user else "/api/v1/tokens"))

    def revoke_token(self, token_id: int) -> TokenResponse:
        return TokenResponse.model_validate(self._request("DELETE", f"/api/v1/tokens/{token_id}"))

    # -- cost ------------------------------------------------------------------
    def cost_report(self, by: str = "team", period: str | None = None, tenant: str | None = None) -> CostReport:
        params = {k: v for k, v in {"by": by, "period": period, "tenant": tenant}.items() if v}
        return CostReport.model_validate(self._request("GET", "/api/v1/cost/report", params=params))

    def cost_ledger(
        self, period: str | None = None, tenant: str | None = None, task: str | None = None, limit: int = 1000, offset: int = 0
    ) -> Ledger:
        params = {k: v for k, v in {"period": period, "tenant": tenant, "task": task, "limit": limit, "offset": offset}.items() if v is not None}
        return Ledger.model_validate(self._request("GET", "/api/v1/cost/ledger", params=params))

    def budget_status(self, tenant: str | None = None) -> list[BudgetStatus]:
        return _parse(list[BudgetStatus], self._request("GET", "/api/v1/budgets/status", params={"tenant": tenant} if tenant else {}))
