"""The retriever's error documents: told apart by ``type``, and no exception text in any of them."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from retriever.app import install_problem_handlers
from retriever.store_port import VectorStoreError

pytestmark = pytest.mark.unit

SECRET = "qdrant.internal:6333 api-key=hunter2"


def app_raising(exc: Exception) -> TestClient:
    app = FastAPI()
    install_problem_handlers(app)

    @app.get("/boom")
    async def boom() -> None:
        raise exc

    return TestClient(app, raise_server_exceptions=False)


@pytest.mark.parametrize(
    ("exc", "status", "type_"),
    [
        (RuntimeError(SECRET), 500, "/problems/internal"),
        (VectorStoreError(f"cannot connect to Qdrant at {SECRET}"), 503, "/problems/store-unavailable"),
    ],
)
def test_internal_errors_keep_their_text_in_the_log(exc: Exception, status: int, type_: str) -> None:
    with app_raising(exc) as client:
        resp = client.get("/boom")
    assert resp.status_code == status and resp.headers["content-type"] == "application/problem+json"
    assert resp.json()["type"] == type_
    assert "hunter2" not in resp.text and "qdrant.internal" not in resp.text


def test_a_store_outage_is_logged_for_the_operator_and_titled_for_the_caller(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("ERROR", logger="parley.retriever"), app_raising(VectorStoreError(SECRET)) as client:
        resp = client.get("/boom")
    assert resp.json()["title"] == "Store unavailable"
    assert resp.json()["detail"] == "the vector store is unavailable"
    logged = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("vector store unavailable on /boom" in m and "hunter2" in m for m in logged), logged
