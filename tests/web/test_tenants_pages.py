"""Tenants & quotas (/tenants): the tenant tree with each quota's nominal, used, borrowed,
lent and headroom as the API computes them, while a task borrows from a sibling; a tenant
user sees only its part of the tree."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.loop import run_pass
from hetpool.server.workers.scheduler import schedule_once
from tests.server.helpers import example_task
from tests.web.conftest import sign_in

QUOTAS = [
    {"kind": "Quota", "name": "lab-gpus", "tenant": "ai-lab", "limits": [{"resource": "gpu", "nominal": 16}]},
    {"kind": "Quota", "name": "nlp-gpus", "tenant": "ai-lab/nlp", "limits": [{"resource": "gpu", "nominal": 4, "borrowing_limit": 4}]},
    {"kind": "Quota", "name": "cv-gpus", "tenant": "ai-lab/cv", "limits": [{"resource": "gpu", "nominal": 8, "lending_limit": 6}]},
]


def as_admin(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def borrowing(ctx: ServiceContext, browser_client: TestClient, admin_token: str) -> list[dict]:
    """NLP runs 8 GPUs on a nominal 4: it borrows 4 of CV's idle quota. Returns the API's usage."""
    applied = browser_client.post("/api/v1/apply", json={"documents": QUOTAS}, headers=as_admin(admin_token))
    assert applied.status_code == 200, applied.text
    task = {**example_task("pytorch-ddp-training.yaml"), "name": "sft", "command": "sleep 600"}
    submitted = browser_client.post("/api/v1/tasks", json=task, headers=as_admin(admin_token))
    assert submitted.status_code == 201, submitted.text
    run_pass(ctx, (schedule_once,))  # admitted: holds its placement (and its quota) without starting
    usage = browser_client.get("/api/v1/quotas/usage", headers=as_admin(admin_token)).json()
    nlp = next(r for r in usage if r["quota"] == "nlp-gpus")
    assert (nlp["used"], nlp["borrowed"]) == (8, 4), usage
    return usage


def quota_row(html: str, quota: str) -> str:
    match = re.search(rf'<tr class="quota-row[^"]*" data-tenant="[^"]+" data-quota="{quota}"[^>]*>.*?</tr>', html, re.S)
    assert match, f"no row for quota {quota}"
    return match.group(0)


def cell(row: str, name: str) -> str:
    match = re.search(rf'<td class="num {name}">([^<]*)</td>', row)
    assert match, f"no {name} cell"
    return match.group(1).strip()


def tenants_on(html: str) -> list[str]:
    return re.findall(r'<tr class="tenant-row" data-tenant="([^"]+)"', html)


def test_the_tree_shows_every_quota_as_the_api_counts_it(browser_client: TestClient, borrowing: list[dict]) -> None:
    page = browser_client.get("/tenants")
    assert page.status_code == 200
    tree = tenants_on(page.text)
    assert tree[:4] == ["ai-lab", "ai-lab/cv", "ai-lab/cv/detection", "ai-lab/nlp"] and "infra/data/etl" in tree  # parents before children
    assert 'data-tenant="ai-lab/nlp/llm-sft" data-depth="2"' in page.text
    for usage in borrowing:
        row = quota_row(page.text, usage["quota"])
        assert f'data-resource="{usage["resource"]}"' in row
        for field in ("nominal", "used", "borrowed", "lent", "headroom"):
            assert float(cell(row, field)) == pytest.approx(usage[field]), (usage["quota"], field)
    nlp = quota_row(page.text, "nlp-gpus")
    assert 'class="quota-row borrowing full"' in nlp and 'data-used-pct="200.0"' in nlp
    assert cell(nlp, "borrowing-limit") == "4" and cell(nlp, "lending-limit") == "no limit"
    cv = quota_row(page.text, "cv-gpus")
    assert cell(cv, "lent") == "4" and cell(cv, "lending-limit") == "6"
    # A tenant without its own quota says which quotas count it.
    assert "Quotas above it: ai-lab, ai-lab/nlp." in page.text
    assert re.search(r'data-card="borrowing"><b>1</b>', page.text)


def test_a_tenant_user_sees_only_its_subtree_and_the_quotas_above_it(browser_client: TestClient, admin_token: str, borrowing: list[dict]) -> None:
    created = browser_client.post(
        "/api/v1/users", json={"name": "carol", "bindings": [{"role": "member", "tenant": "ai-lab/cv"}]}, headers=as_admin(admin_token)
    )
    assert created.status_code == 201, created.text
    token = browser_client.post("/api/v1/users/carol/tokens", json={"label": "web"}, headers=as_admin(admin_token)).json()["token"]
    carol = sign_in(TestClient(browser_client.app), token)
    page = carol.get("/tenants").text
    assert tenants_on(page) == ["ai-lab", "ai-lab/cv", "ai-lab/cv/detection"]
    assert 'data-quota="cv-gpus"' in page and 'data-quota="lab-gpus"' in page and 'data-quota="nlp-gpus"' not in page
    assert 'id="tenants-scope-note"' in page and "ai-lab/nlp" not in page


def test_a_subtree_filter_live_fragment_and_chinese(browser_client: TestClient, borrowing: list[dict]) -> None:
    page = browser_client.get("/tenants", params={"tenant": "ai-lab/nlp"}).text
    assert tenants_on(page) == ["ai-lab", "ai-lab/nlp", "ai-lab/nlp/llm-serving", "ai-lab/nlp/llm-sft"]
    assert 'data-quota="cv-gpus"' not in page and 'data-quota="nlp-gpus"' in page
    assert '<option value="ai-lab/nlp" selected>' in page
    fragment = browser_client.get("/tenants", params={"tenant": "ai-lab/nlp", "fragment": "tenant-quotas"}).text
    assert fragment.startswith('<section id="tenant-quotas"') and "tenant=ai-lab/nlp" in fragment and "<html" not in fragment
    chinese = browser_client.get("/tenants?lang=zh-CN").text
    assert "租户与配额" in chinese and "借入" in chinese and "不限" in chinese
