"""The OpenAPI document states every status each operation answers, and the batch file's media type.

A real redis-server and the real app over HTTP, no worker (submitted jobs stay queued). The document
is walked for the operations a client most relies on (submitting, cancelling and deleting debates and
batches): each lists exactly the statuses it can answer, every 4xx/5xx as a problem document with the
problem types it can carry. Then the statuses are provoked, and each answer (status and problem
``type``) must be one the operation documents. The multipart ``file`` part of ``POST /v1/batches`` is
text of JSON lines, with its media types in the part's ``encoding``, so bytes that are not text are
no schema-valid upload (and are refused).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.api.support import ApiServer

pytestmark = pytest.mark.integration

PROBLEM = "application/problem+json"
Q = {"question": "What is the capital of France?", "config": {"knowledge": "none"}}
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108000000003a7e9b55")

# Every status each operation can answer: its success, then what its security requirement (401, 429),
# its body (400, 413, 422), its Idempotency-Key (409, 422), its parameters (422, 404) and the job
# store (503) add, and what the route itself can refuse (409 for a finished job or a batch item, 415).
EXPECTED: dict[tuple[str, str], set[str]] = {
    ("post", "/v1/debates"): {"202", "400", "401", "409", "413", "422", "429", "503"},
    ("get", "/v1/debates/{job_id}"): {"200", "401", "404", "422", "429", "503"},
    ("post", "/v1/debates/{job_id}/cancel"): {"200", "401", "404", "409", "422", "429", "503"},
    ("delete", "/v1/debates/{job_id}"): {"200", "401", "404", "409", "422", "429", "503"},
    ("post", "/v1/batches"): {"202", "400", "401", "409", "413", "415", "422", "429", "503"},
    ("post", "/v1/batches/{batch_id}/cancel"): {"200", "401", "404", "422", "429", "503"},
    ("delete", "/v1/batches/{batch_id}"): {"200", "401", "404", "422", "429", "503"},
}


@pytest.fixture(scope="module")
def spec(api: ApiServer) -> dict[str, Any]:
    document: dict[str, Any] = httpx.get(f"{api.url}/openapi.json", timeout=30).json()
    return document


def problem_types(spec: dict[str, Any], method: str, path: str, status: str) -> set[str]:
    """The problem types the operation documents for ``status`` (empty for a success)."""
    response = spec["paths"][path][method]["responses"][status]
    schema = response["content"].get(PROBLEM, {}).get("schema", {})
    for part in schema.get("allOf", []):
        if "properties" in part:
            return set(part["properties"]["type"]["enum"])
    return set()


@pytest.mark.parametrize(("method", "path"), list(EXPECTED), ids=[f"{m} {p}" for m, p in EXPECTED])
def test_each_operation_documents_every_status_it_answers(
    spec: dict[str, Any], method: str, path: str
) -> None:
    op = spec["paths"][path][method]
    assert set(op["responses"]) == EXPECTED[(method, path)]
    assert not op.get("deprecated")
    for status, response in op["responses"].items():
        if int(status) >= 400:
            assert list(response["content"]) == [PROBLEM], (status, response)
            assert problem_types(spec, method, path, status), (status, "no problem types")
        if status in ("429", "503"):
            assert "Retry-After" in response["headers"]


def test_no_operation_is_deprecated(spec: dict[str, Any]) -> None:
    deprecated = [
        (m, p) for p, item in spec["paths"].items() for m, op in item.items() if op.get("deprecated")
    ]
    assert deprecated == []


def test_delete_answers_its_own_models(spec: dict[str, Any]) -> None:
    for path, model in (
        ("/v1/debates/{job_id}", "DebateDeleted"),
        ("/v1/batches/{batch_id}", "BatchDeleted"),
    ):
        ok = spec["paths"][path]["delete"]["responses"]["200"]["content"]["application/json"]["schema"]
        assert ok["$ref"] == f"#/components/schemas/{model}"
        schema = spec["components"]["schemas"][model]
        assert set(schema["properties"]) == {"id", "object", "deleted"}
        assert schema["properties"]["deleted"]["const"] is True
    assert problem_types(spec, "delete", "/v1/debates/{job_id}", "409") == {"/problems/batch-item"}


def test_a_reused_idempotency_key_is_documented_where_it_is_accepted(spec: dict[str, Any]) -> None:
    for path in ("/v1/debates", "/v1/batches"):
        op = spec["paths"][path]["post"]
        assert "idempotency-key" in {p["name"].lower() for p in op["parameters"] if p["in"] == "header"}
        assert "/problems/idempotency-key-reused" in problem_types(spec, "post", path, "422")
        assert "/problems/idempotency-in-progress" in problem_types(spec, "post", path, "409")


def test_every_answer_provoked_is_documented(
    spec: dict[str, Any], api: ApiServer, alice: httpx.Client, bob: httpx.Client
) -> None:
    """Each answer, by status and problem type, is one its operation documents."""
    answers: list[tuple[str, str, httpx.Response]] = []

    def call(method: str, path: str, url: str, **kwargs: Any) -> httpx.Response:
        resp = alice.request(method.upper(), url, **kwargs)
        answers.append((method, path, resp))
        return resp

    key = {"Idempotency-Key": "contract-reused"}
    job_id = call("post", "/v1/debates", "/v1/debates", json=Q, headers=key).json()["job_id"]
    reused = call("post", "/v1/debates", "/v1/debates", json={**Q, "question": "Another?"}, headers=key)
    assert reused.status_code == 422 and reused.json()["type"] == "/problems/idempotency-key-reused"
    call("post", "/v1/debates", "/v1/debates", content=b"{", headers={"content-type": "application/json"})
    call("post", "/v1/debates", "/v1/debates", json={"question": "q?", "answers": ["x" * (2 << 20)]})
    call("post", "/v1/debates", "/v1/debates", json={"question": ""})
    call("get", "/v1/debates/{job_id}", f"/v1/debates/{job_id}")
    call("get", "/v1/debates/{job_id}", "/v1/debates/job_unknown")

    batch = call(
        "post", "/v1/batches", "/v1/batches", json={"items": [{"question": "a?"}, {"question": "b?"}]}
    )
    batch_id = batch.json()["batch_id"]
    item = alice.get(f"/v1/batches/{batch_id}/results").text.splitlines()[0]
    item_id = json.loads(item)["job_id"]
    call("post", "/v1/batches", "/v1/batches", content=b"x", headers={"content-type": "text/csv"})
    call("post", "/v1/batches", "/v1/batches", files={"file": ("b.png", PNG, "image/png")})
    call("delete", "/v1/debates/{job_id}", f"/v1/debates/{item_id}")  # an item of a batch: 409
    call("post", "/v1/debates/{job_id}/cancel", f"/v1/debates/{job_id}/cancel")
    call("post", "/v1/debates/{job_id}/cancel", f"/v1/debates/{job_id}/cancel")
    call("delete", "/v1/debates/{job_id}", f"/v1/debates/{job_id}")
    call("delete", "/v1/debates/{job_id}", f"/v1/debates/{job_id}")  # twice: 404
    call("post", "/v1/debates/{job_id}/cancel", f"/v1/debates/{job_id}/cancel")  # deleted: 404
    call("post", "/v1/batches/{batch_id}/cancel", f"/v1/batches/{batch_id}/cancel")
    call("delete", "/v1/batches/{batch_id}", f"/v1/batches/{batch_id}")
    call("delete", "/v1/batches/{batch_id}", f"/v1/batches/{batch_id}")
    answers += [
        ("delete", "/v1/debates/{job_id}", httpx.delete(f"{api.url}/v1/debates/{job_id}")),  # no key: 401
        ("delete", "/v1/batches/{batch_id}", bob.delete(f"/v1/batches/{batch_id}")),
    ]

    seen: set[tuple[str, str, int]] = set()
    for method, path, resp in answers:
        status = str(resp.status_code)
        documented = spec["paths"][path][method]["responses"]
        assert status in documented, (method, path, status, resp.text)
        if resp.status_code >= 400:
            assert resp.headers["content-type"].startswith(PROBLEM)
            assert resp.json()["type"] in problem_types(spec, method, path, status), (method, path, resp.text)
        seen.add((method, path, resp.status_code))
    # The run reached the answers it is about.
    assert {
        ("post", "/v1/debates", 202),
        ("post", "/v1/debates", 422),
        ("post", "/v1/debates", 400),
        ("post", "/v1/debates", 413),
        ("post", "/v1/batches", 415),
        ("post", "/v1/batches", 422),
        ("delete", "/v1/debates/{job_id}", 200),
        ("delete", "/v1/debates/{job_id}", 404),
        ("delete", "/v1/debates/{job_id}", 409),
        ("delete", "/v1/debates/{job_id}", 401),
        ("delete", "/v1/batches/{batch_id}", 200),
        ("delete", "/v1/batches/{batch_id}", 404),
        ("post", "/v1/debates/{job_id}/cancel", 200),
        ("post", "/v1/debates/{job_id}/cancel", 404),
    } <= seen


def test_the_batch_file_part_is_text_of_json_lines(spec: dict[str, Any], alice: httpx.Client) -> None:
    multipart = spec["paths"]["/v1/batches"]["post"]["requestBody"]["content"]["multipart/form-data"]
    file_schema = multipart["schema"]["properties"]["file"]
    assert file_schema["type"] == "string" and "format" not in file_schema
    types = [t.strip() for t in multipart["encoding"]["file"]["contentType"].split(",")]
    assert types[0] == "application/jsonl" and set(types) == {
        "application/jsonl",
        "application/x-ndjson",
        "text/plain",
    }
    assert multipart["encoding"]["config"]["contentType"] == "application/json"

    jsonl = '{"question": "one?"}\n{"question": "two?", "id": "b"}\n'
    # As a file (what curl -F and httpx send, labelled application/octet-stream) and as a text field.
    as_file = alice.post(
        "/v1/batches", files={"file": ("b.jsonl", jsonl.encode(), "application/octet-stream")}
    )
    as_field = alice.post("/v1/batches", files={"file": (None, jsonl, "application/jsonl")})
    assert as_file.status_code == as_field.status_code == 202, (as_file.text, as_field.text)
    assert as_file.json()["total"] == as_field.json()["total"] == 2
    config = json.dumps({"rounds": 2})
    with_config = alice.post(
        "/v1/batches",
        files={"file": ("b.jsonl", jsonl.encode()), "config": ("config.json", config, "application/json")},
    )
    assert with_config.status_code == 202, with_config.text
    assert alice.get(with_config.headers["location"]).json()["config"]["rounds"] == 2
    # A part the document does not name is refused, not ignored.
    extra = alice.post("/v1/batches", files={"file": (None, jsonl), "notes": (None, "x")})
    assert extra.status_code == 422 and extra.json()["type"] == "/problems/invalid-batch"
    # Bytes that are not text of JSON lines are refused, whatever they are labelled.
    for part in (("b.png", PNG, "image/png"), (None, PNG, "application/jsonl")):
        refused = alice.post("/v1/batches", files={"file": part})
        assert refused.status_code == 422, refused.text
        assert refused.json()["type"] == "/problems/invalid-batch"
