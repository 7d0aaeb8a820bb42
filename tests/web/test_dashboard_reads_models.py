"""The dashboard reads the API's answers through its response models: an answer that
drifts from its model (a required field missing, a field the model does not declare) is
the dashboard's error page, never a page half rendered from whatever keys were there."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from hetpool.web.session import Api
from tests.server.helpers import example_task


def _drifted(answer: dict, drift: str) -> dict:
    if drift == "missing":
        return {k: v for k, v in answer.items() if k != "state"}
    return {**answer, "undeclared": 1}


@pytest.mark.parametrize("drift", ["missing", "extra"])
def test_an_answer_off_its_model_is_the_error_page(browser_client: TestClient, admin_token: str, monkeypatch: pytest.MonkeyPatch, drift: str) -> None:
    api = TestClient(browser_client.app, headers={"Authorization": f"Bearer {admin_token}"})
    created = api.post("/api/v1/tasks", json=example_task("data-prep.yaml"))
    assert created.status_code == 201, created.text
    task_id = created.json()["id"]
    real_call = Api.call

    async def drifting_call(self: Api, method: str, path: str, **kwargs: Any) -> Any:
        answer = await real_call(self, method, path, **kwargs)
        return _drifted(answer, drift) if method == "GET" and path == f"/api/v1/tasks/{task_id}" else answer

    monkeypatch.setattr(Api, "call", drifting_call)
    page = browser_client.get(f"/tasks/{task_id}")
    assert page.status_code == 502
    assert 'data-code="bad_api_answer"' in page.text, page.text[:2000]
    assert 'id="task-live"' not in page.text
