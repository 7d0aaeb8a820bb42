"""The approvals inbox (/approvals): a task held by an ApprovalPolicy shows up for its
tenant's approver with what it asks for and costs, is approved or rejected through the
page (CSRF, post/redirect/get, the API's refusals shown), and stays invisible and
undecidable for an approver of another tenant; a submitter sees only its own requests."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from tests.server.helpers import example_task
from tests.web.conftest import csrf_of, sign_in

TENANT = "ai-lab/nlp/llm-sft"


def as_admin(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def make_user(client: TestClient, admin_token: str, name: str, role: str, tenant: str) -> str:
    """Create `name` bound to (role, tenant) with the admin's token; return its own token."""
    created = client.post("/api/v1/users", json={"name": name, "bindings": [{"role": role, "tenant": tenant}]}, headers=as_admin(admin_token))
    assert created.status_code == 201, created.text
    token = client.post(f"/api/v1/users/{name}/tokens", json={"label": "web"}, headers=as_admin(admin_token))
    assert token.status_code == 201, token.text
    return token.json()["token"]


def browser_for(client: TestClient, token: str) -> TestClient:
    return sign_in(TestClient(client.app), token)


def row_of(html: str, approval_id: str, table: str = "approvals-table") -> str:
    section = html.split(f'id="{table}"', 1)
    assert len(section) == 2, f"no #{table} on the page"
    match = re.search(rf'<tr data-approval-id="{approval_id}"[^>]*>.*?</tr>', section[1], re.S)
    assert match, f"{approval_id} not in #{table}"
    return match.group(0)


@pytest.fixture
def held(browser_client: TestClient, admin_token: str) -> dict:
    """A policy holding tasks of more than one device; alice (member) submitted a 2 × 4 GPU task."""
    policy = {"kind": "ApprovalPolicy", "name": "lab", "tenant": "ai-lab", "over_quota": False, "budget_exceeded": False, "max_devices": 1}
    applied = browser_client.post("/api/v1/apply", json={"documents": [policy]}, headers=as_admin(admin_token))
    assert applied.status_code == 200, applied.text
    tokens = {
        "alice": make_user(browser_client, admin_token, "alice", "member", "ai-lab/nlp"),
        "bob": make_user(browser_client, admin_token, "bob", "tenant-admin", "ai-lab"),
        "dave": make_user(browser_client, admin_token, "dave", "tenant-admin", "infra"),
    }
    task = {**example_task("pytorch-ddp-training.yaml"), "name": "big-sft", "env": "dev", "labels": {"hetpool.io/approval-reason": "paper deadline"}}
    submitted = browser_client.post("/api/v1/tasks", json=task, headers=as_admin(tokens["alice"]))
    assert submitted.status_code == 201 and submitted.json()["state"] == "pending_approval", submitted.text
    task_id = submitted.json()["id"]
    approval_id = submitted.json()["approval"]["id"]
    return {"tokens": tokens, "task_id": task_id, "approval_id": approval_id}


def task_state(client: TestClient, admin_token: str, task_id: str) -> dict:
    return client.get(f"/api/v1/tasks/{task_id}", headers=as_admin(admin_token)).json()


def test_an_approver_sees_the_request_and_approves_it_with_a_comment(browser_client: TestClient, admin_token: str, held: dict) -> None:
    bob = browser_for(browser_client, held["tokens"]["bob"])
    page = bob.get("/approvals")
    assert page.status_code == 200
    row = row_of(page.text, held["approval_id"])
    assert 'data-state="pending"' in row and f'data-task-id="{held["task_id"]}"' in row and f'data-tenant="{TENANT}"' in row
    assert "big-sft" in row and "alice" in row and "paper deadline" in row
    assert "asks for 8 devices" in row and "many devices" in row  # the policy's reason and the rule's label
    assert "2 × 4 GPU" in row and "8 devices in all" in row  # requested resources
    assert re.search(r"≈ [0-9.]+ CNY for 6h", row) and "CNY/h on" in row  # estimated cost for the 6 h estimate
    assert 'class="approve"' in row and 'class="reject danger"' in row and 'name="comment"' in row
    assert 'id="approvals-own-only"' not in page.text

    decided = bob.post(f"/approvals/{held['approval_id']}/approve", data={"csrf": csrf_of(page.text), "comment": "go ahead"}, follow_redirects=False)
    assert decided.status_code == 303 and decided.headers["location"] == "/approvals"
    after = bob.get("/approvals").text
    assert 'id="approvals-flash" class="ok"' in after and f"Approved {held['approval_id']}." in after and "queued" in after
    assert 'id="approvals-flash"' not in bob.get("/approvals").text  # shown once
    row = row_of(after, held["approval_id"], "approvals-decided-table")
    assert 'data-state="approved"' in row and '<td class="decided-by">bob</td>' in row and '<td class="comment">go ahead</td>' in row
    task = task_state(browser_client, admin_token, held["task_id"])
    assert task["state"] == "queued" and task["message"] == "approved by bob: go ahead"


def test_a_rejection_without_a_comment_shows_the_apis_message(browser_client: TestClient, admin_token: str, held: dict) -> None:
    bob = browser_for(browser_client, held["tokens"]["bob"])
    csrf = csrf_of(bob.get("/approvals").text)
    refused = bob.post(f"/approvals/{held['approval_id']}/reject", data={"csrf": csrf, "comment": ""}, follow_redirects=True)
    assert refused.status_code == 200
    flash = re.search(r'<p id="approvals-flash" class="error"[^>]*>(.*?)</p>', refused.text, re.S)
    assert flash and "was not decided" in flash.group(1) and "comment" in flash.group(1)
    assert 'data-state="pending"' in row_of(refused.text, held["approval_id"])
    assert task_state(browser_client, admin_token, held["task_id"])["state"] == "pending_approval"

    bob.post(f"/approvals/{held['approval_id']}/reject", data={"csrf": csrf, "comment": "use 4 GPUs"})
    task = task_state(browser_client, admin_token, held["task_id"])
    assert task["state"] == "cancelled" and task["message"] == "rejected by bob: use 4 GPUs"
    # A stale or forged form is refused before anything reaches the API.
    assert bob.post(f"/approvals/{held['approval_id']}/approve", data={"csrf": "0" * 32}).status_code == 403


def test_another_tenants_approver_neither_sees_nor_decides_it(browser_client: TestClient, admin_token: str, held: dict) -> None:
    dave = browser_for(browser_client, held["tokens"]["dave"])
    page = dave.get("/approvals").text
    assert held["approval_id"] not in page and 'id="approvals-table"' not in page
    response = dave.post(f"/approvals/{held['approval_id']}/approve", data={"csrf": csrf_of(page), "comment": "mine now"}, follow_redirects=True)
    assert 'class="error"' in response.text and "not found" in response.text
    assert task_state(browser_client, admin_token, held["task_id"])["state"] == "pending_approval"


def test_a_submitter_sees_its_own_request_without_buttons_in_both_languages(browser_client: TestClient, held: dict) -> None:
    alice = browser_for(browser_client, held["tokens"]["alice"])
    page = alice.get("/approvals").text
    row = row_of(page, held["approval_id"])
    assert 'data-state="pending"' in row and 'class="approve"' not in row and 'name="comment"' not in row
    assert 'id="approvals-own-only"' in page
    chinese = alice.get("/approvals?lang=zh-CN").text
    assert "待审批" in chinese and "申请的资源" in chinese and "设备数过多" in chinese
    # The live fragment is just the section.
    fragment = alice.get("/approvals?fragment=approvals-pending")
    assert fragment.text.lstrip().startswith('<section id="approvals-pending"') and "<html" not in fragment.text
    assert held["approval_id"] in fragment.text
