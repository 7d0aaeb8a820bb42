"""Issue 14, finding 7: bad input never reaches a 500. Each cause found by hand is its own
test here, on SQLite and PostgreSQL (PostgreSQL refuses NUL in text and integers over
its column types, where SQLite shrugs): lone surrogates, NUL bytes in the path, the query
and the body, integers too large for the database, times out of range, oversized and
NUL-holding commands, environment variables and free text. Every answer is the JSON
error shape {code, message, details} naming where the problem is and the limit."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from hetpool.core.base import MAX_COMMAND_BYTES, MAX_ENV_VALUE_BYTES, MAX_ENV_VARS, MAX_TEXT_CHARS

TASK = {
    "name": "bad-input",
    "tenant": "ai-lab/nlp/llm-sft",
    "type": "general",
    "per_worker": {"devices": {"class": "cpu", "count": 1}},
    "command": "echo hi",
}


def refused(response, where: str, *, says: str = "", status: int = 422) -> dict:
    """The answer is `status` with the JSON error shape, and its message names `where`."""
    assert response.status_code == status, f"{response.status_code} {response.text[:400]}"
    body = response.json()
    assert body["code"] and body["message"], body
    assert where in body["message"], body
    if says:
        assert says in body["message"], body
    return body


def raw_post(api: TestClient, path: str, text: str | bytes):
    return api.post(path, content=text if isinstance(text, bytes) else text.encode(), headers={"Content-Type": "application/json"})


def task_json(**fields) -> str:
    return json.dumps({**TASK, **fields})


# --- lone surrogates --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "where"),
    [
        ("/api/v1/apply", '{"documents": [{"kind": "Tenant", "name": "\\ud800"}]}', "body.documents[0].name"),
        ("/api/v1/apply", '{"documents": [{"kind": "Tenant", "name": "ok", "labels": {"\\udfff": "x"}}]}', "body.documents[0].labels"),
        ("/api/v1/tasks", task_json(name="__S__").replace('"__S__"', '"a\\ud800b"'), "body.name"),
        ("/api/v1/tasks/plan", task_json(name="__S__").replace('"__S__"', '"\\ud800"'), "body.name"),
        ("/api/v1/users", '{"name": "\\ud800"}', "body.name"),
    ],
    ids=["apply-tenant-name", "apply-label-key", "submit-task-name", "plan-task-name", "user-name"],
)
def test_a_lone_surrogate_escape_is_a_422_naming_the_field(demo: TestClient, path: str, body: str, where: str) -> None:
    # Was a 500: the message echoing the name could not be encoded as UTF-8.
    refused(raw_post(demo, path, body), where, says="surrogate")


def test_a_surrogate_sent_as_raw_utf8_bytes_is_a_422_too(demo: TestClient) -> None:
    # The JSON decoder reads bytes with 'surrogatepass': ED A0 80 becomes the same lone surrogate.
    body = b'{"documents": [{"kind": "Tenant", "name": "\xed\xa0\x80"}]}'
    refused(raw_post(demo, "/api/v1/apply", body), "body.documents[0].name", says="surrogate")
    pair = raw_post(demo, "/api/v1/apply", '{"documents": [{"kind": "Tenant", "name": "ok-pair", "description": "\\ud83d\\ude00"}]}')
    assert pair.status_code == 200, pair.text  # a valid pair (an emoji) is ordinary text


# --- NUL bytes --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/api/v1/tasks/a%00b", "/api/v1/users/a%00b", "/api/v1/approvals/a%00b", "/api/v1/objects/tenants/a%00b", "/api/v1/tasks/x%00/logs"],
)
def test_a_nul_byte_in_the_path_is_a_422_naming_the_path(demo: TestClient, path: str) -> None:
    refused(demo.get(path), "path", says="NUL")


@pytest.mark.parametrize(
    ("path", "param"),
    [
        ("/api/v1/tasks", "tenant"),
        ("/api/v1/audit", "actor"),
        ("/api/v1/audit/export", "object_id"),
        ("/api/v1/cost/ledger", "task"),
        ("/api/v1/approvals", "tenant"),
        ("/api/v1/resources/tree", "cluster"),
    ],
)
def test_a_nul_byte_in_a_query_parameter_is_a_422_naming_it(demo: TestClient, path: str, param: str) -> None:
    refused(demo.get(path, params={param: "a\x00b"}), f"query.{param}", says="NUL")


@pytest.mark.parametrize(
    ("path", "body", "where"),
    [
        ("/api/v1/tokens", '{"label": "a\\u0000b"}', "body.label"),
        ("/api/v1/apply", '{"documents": [{"kind": "Tenant", "name": "nul", "description": "a\\u0000b"}]}', "body.documents[0].description"),
        ("/api/v1/tasks", task_json(command="echo a\x00b"), "body.command"),
        ("/api/v1/tasks", task_json(env_vars={"A": "a\x00b"}), "body.env_vars.A"),
        ("/api/v1/approvals/nope/reject", '{"comment": "\\u0000"}', "body.comment"),
    ],
    ids=["token-label", "apply-description", "task-command", "task-env-value", "approval-comment"],
)
def test_a_nul_byte_in_a_json_body_is_a_422_naming_the_field(demo: TestClient, path: str, body: str, where: str) -> None:
    refused(raw_post(demo, path, body), where, says="NUL")


def test_a_nul_byte_in_a_form_body_is_a_422_naming_the_field(demo: TestClient) -> None:
    answer = demo.post("/login", data={"token": "hp_x", "next": "/\x00"})
    refused(answer, "form.next", says="NUL")


# --- integers too large for the database --------------------------------------------------


@pytest.mark.parametrize(
    ("path", "param", "value"),
    [
        ("/api/v1/audit", "after_id", 9_999_999_999),  # over PostgreSQL INTEGER
        ("/api/v1/audit", "after_id", 10**20),  # over any 64-bit integer
        ("/api/v1/cost/ledger", "offset", 10**20),
        ("/api/v1/tasks/any/logs", "offset", 10**20),
    ],
)
def test_an_integer_query_parameter_over_its_bound_is_a_422_naming_the_limit(demo: TestClient, path: str, param: str, value: int) -> None:
    body = refused(demo.get(path, params={param: value}), f"query.{param}", says="less than or equal to")
    assert any(d["loc"] == f"query.{param}" for d in body["details"])


@pytest.mark.parametrize("token_id", [9_999_999_999, 10**20, -1])
def test_a_token_id_out_of_range_in_the_path_is_a_422(demo: TestClient, token_id: int) -> None:
    refused(demo.delete(f"/api/v1/tokens/{token_id}"), "path.token_id")


def test_the_largest_valid_ids_and_offsets_answer_normally(demo: TestClient) -> None:
    assert demo.get("/api/v1/audit", params={"after_id": 2**31 - 1}).json() == []
    assert demo.delete(f"/api/v1/tokens/{2**31 - 1}").status_code == 404
    assert demo.get("/api/v1/cost/ledger", params={"offset": 2**40}).status_code == 200


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("since", "99999999999999999999"),  # seconds back from now: before year 1
        ("until", "99999999999999999999d"),
        ("since", "3000000d"),
        ("since", "0001-01-01T00:00:00+14:00"),  # UTC of it is before year 1
        ("until", "9999-12-31T23:59:59-14:00"),  # UTC of it is after year 9999
    ],
)
def test_audit_times_out_of_range_are_a_422_naming_the_parameter(demo: TestClient, param: str, value: str) -> None:
    for path in ("/api/v1/audit", "/api/v1/audit/export"):
        refused(demo.get(path, params={param: value}), param)


# --- commands, environment and free text: limits checked at submit ------------------------


def test_a_1_mb_command_is_refused_at_submit_and_plan_with_the_limit(demo: TestClient) -> None:
    # Was accepted (201) and failed at run time: one argument over 128 KiB is E2BIG for exec.
    big = task_json(command="x" * 1_000_000)
    for path in ("/api/v1/tasks", "/api/v1/tasks/plan"):
        body = refused(raw_post(demo, path, big), "command", says=str(MAX_COMMAND_BYTES))
        assert "1000000 bytes" in body["message"]
    wide = "汉" * (MAX_COMMAND_BYTES // 3 + 1)  # under the limit in characters, over it in bytes
    refused(raw_post(demo, "/api/v1/tasks", task_json(command=wide)), "command", says=str(MAX_COMMAND_BYTES))
    template = {"kind": "TaskTemplate", "name": "huge", "type": "general", "defaults": {"command": "y" * (MAX_COMMAND_BYTES + 1)}}
    refused(demo.post("/api/v1/apply", json={"documents": [template]}), "defaults.command", says=str(MAX_COMMAND_BYTES))
    at_limit = demo.post("/api/v1/tasks", json={**TASK, "command": "true " + "#" * (MAX_COMMAND_BYTES - 5)})
    assert at_limit.status_code == 201, at_limit.text[:300]


@pytest.mark.parametrize(
    ("env_vars", "where", "says"),
    [
        ({"BAD NAME": "1"}, "env_vars", "BAD NAME"),
        ({"1X": "1"}, "env_vars", "[A-Za-z_]"),
        ({"A": "v" * (MAX_ENV_VALUE_BYTES + 1)}, "env_vars.A", str(MAX_ENV_VALUE_BYTES)),
        ({f"V{i}": "1" for i in range(MAX_ENV_VARS + 1)}, "env_vars", str(MAX_ENV_VARS)),
    ],
    ids=["space-in-name", "leading-digit", "value-too-long", "too-many"],
)
def test_environment_variables_are_checked_at_submit(demo: TestClient, env_vars: dict, where: str, says: str) -> None:
    refused(demo.post("/api/v1/tasks", json={**TASK, "env_vars": env_vars}), where, says=says)


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ({"kind": "Tenant", "name": "t-desc", "description": "d" * (MAX_TEXT_CHARS + 1)}, "description"),
        ({"kind": "Tenant", "name": "t-disp", "display_name": "d" * 10_000}, "display_name"),
        ({"kind": "Tenant", "name": "t-label", "labels": {"k": "v" * 10_000}}, "labels.k"),
        ({"kind": "Tenant", "name": "t-labels", "labels": {f"k{i}": "v" for i in range(1000)}}, "labels"),
        ({**TASK, "kind": "Task", "image": "i" * 10_000}, "image"),
        ({**TASK, "kind": "Task", "data": {"zone": "z" * 10_000}}, "data.zone"),
        ({**TASK, "kind": "Task", "features": ["f" * 10_000]}, "features"),
    ],
    ids=["description", "display-name", "label-value", "label-count", "image", "data-zone", "feature"],
)
def test_free_text_fields_have_a_limit_named_in_the_error(demo: TestClient, document: dict, where: str) -> None:
    body = refused(demo.post("/api/v1/apply", json={"documents": [document]}), where)
    assert "at most" in body["message"], body


# --- non-finite numbers as raw JSON -------------------------------------------------------


@pytest.mark.parametrize("token", ["Infinity", "-Infinity", "NaN", "1e309"])
def test_a_non_finite_number_in_a_json_body_is_a_422_naming_the_field(demo: TestClient, token: str) -> None:
    budget = '{"documents": [{"kind": "Budget", "name": "b", "tenant": "ai-lab", "amount": TOKEN}]}'.replace("TOKEN", token)
    # Refused by the spec models (core/limits.py), which name the document and the limit.
    refused(raw_post(demo, "/api/v1/apply", budget), "Budget/b: amount", says="finite")
    assert demo.get("/api/v1/budgets/status").status_code == 200  # nothing was stored to break it later


def test_an_agent_report_has_bounded_text(demo: TestClient) -> None:
    node = {"name": "agent-text", "cluster": "gz-general", "cpu_cores": 4, "memory_gb": 8}
    assert demo.post("/api/v1/agent/register", json={"node": node}).status_code == 200
    beat = {"node": "agent-text", "devices": [{"index": 0, "model": "m" * 10_000}]}
    refused(demo.post("/api/v1/agent/heartbeat", json=beat), "body.devices[0].model", says="at most 200")
    refused(demo.post("/api/v1/agent/register", json={"node": node, "pool": "p" * 10_000}), "body.pool", says="at most 200")
