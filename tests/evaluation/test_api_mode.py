"""``parley eval --api``: the batch client against a small FastAPI app speaking the gateway's batch
contract (failures, resume of a submitted batch, auth), and once against the real gateway stack
(redis-server, the API under uvicorn, a Celery worker process, the scripted LLM)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from engine.config import DebateConfig
from engine.runner import run_debate
from evaluation.api_client import batch_items
from evaluation.datasets import load_dataset
from evaluation.harness import EvalRequest, evaluate
from evaluation.store import Workspace
from parley_client import AsyncParleyClient, ParleyError
from services.knowledge import empty_pool
from tests.evaluation.conftest import QUESTIONS, models_for
from tests.support.scripted_llm import ScriptedLLM, free_port

pytestmark = pytest.mark.integration
KEY = "secret-key"


class ContractGateway:
    """The batch endpoints of the gateway contract, debating with the real engine on the scripted LLM."""

    def __init__(self, llm_url: str) -> None:
        self.llm_url = llm_url
        self.batches: dict[str, dict[str, Any]] = {}
        self.posts: list[dict[str, Any]] = []
        self.fail_questions: set[str] = set()
        self.port = free_port()
        self.app = self._build()
        self._server: uvicorn.Server | None = None

    def _problem(self, status: int, detail: str) -> JSONResponse:
        return JSONResponse(
            {"type": "about:blank", "title": "error", "status": status, "detail": detail},
            status_code=status,
            media_type="application/problem+json",
        )

    def _build(self) -> FastAPI:
        app = FastAPI()

        @app.middleware("http")
        async def auth(request: Request, call_next: Any) -> Response:
            if request.headers.get("authorization") != f"Bearer {KEY}":
                return self._problem(401, "missing or wrong API key")
            return await call_next(request)

        @app.post("/v1/batches", status_code=202)
        async def create(request: Request) -> dict[str, Any]:
            body = await request.json()
            self.posts.append(body)
            batch_id = f"bat-{len(self.posts)}"
            rows = [
                {
                    "id": it["id"],
                    "index": i,
                    "job_id": f"job-{i}",
                    "status": "queued",
                    "question": it["question"],
                    "answers": it["answers"],
                    "result": None,
                    "error": None,
                }
                for i, it in enumerate(body["items"])
            ]
            self.batches[batch_id] = {"rows": rows, "config": body["config"]}
            asyncio.get_running_loop().create_task(self._work(batch_id))
            location = f"/v1/batches/{batch_id}"
            return {"batch_id": batch_id, "status": "queued", "total": len(rows), "location": location}

        @app.get("/v1/batches/{batch_id}", response_model=None)
        async def status(batch_id: str) -> Any:
            batch = self.batches.get(batch_id)
            if batch is None:
                return self._problem(404, f"no batch {batch_id!r}")
            counts = {"queued": 0, "debating": 0, "completed": 0, "failed": 0, "cancelled": 0}
            for row in batch["rows"]:
                counts[row["status"]] += 1
            done = counts["completed"] + counts["failed"]
            total = len(batch["rows"])
            return {
                "batch_id": batch_id,
                "status": "completed" if done == total else "running",
                "total": total,
                "counts": counts,
                "progress": done / total,
                "created_at": 0.0,
                "config": batch["config"],
            }

        @app.get("/v1/batches/{batch_id}/results", response_model=None)
        async def results(batch_id: str) -> Any:
            batch = self.batches.get(batch_id)
            if batch is None:
                return self._problem(404, f"no batch {batch_id!r}")
            text = "".join(json.dumps(r) + "\n" for r in batch["rows"])
            return Response(text, media_type="application/x-ndjson")

        return app

    async def _work(self, batch_id: str) -> None:
        batch = self.batches[batch_id]
        config = DebateConfig.model_validate(batch["config"])
        models = models_for(self.llm_url)
        for row in batch["rows"]:
            row["status"] = "debating"
            if row["question"] in self.fail_questions:
                row.update(status="failed", error="LLMUnavailable: cannot reach LLM server")
                continue
            result = await run_debate(row["question"], empty_pool(row["question"]), config, models)
            row.update(status="completed", result=result.model_dump(mode="json"))
            await asyncio.sleep(0.01)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ContractGateway:
        self._server = uvicorn.Server(
            uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        )
        threading.Thread(target=self._server.run, daemon=True).start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline, "contract gateway did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.should_exit = True


@pytest.fixture
def gateway(scripted: ScriptedLLM) -> Iterator[ContractGateway]:
    with ContractGateway(scripted.base_url) as gw:
        yield gw


def req(dataset: Path, out: Path, **kw: Any) -> EvalRequest:
    return EvalRequest(dataset=dataset, out=out, progress=False, plots=False, bootstrap_samples=200, **kw)


async def test_api_run_records_failures_and_resubmits_only_them(
    gateway: ContractGateway, nq_dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "api"
    gateway.fail_questions = {QUESTIONS[2]["question"]}
    client = AsyncParleyClient(gateway.url, api_key=KEY)
    try:
        outcome = await evaluate(
            req(nq_dataset, out, protocols=["single", "cot"]), batch_client=client, poll_interval_s=0.02
        )
        run = outcome.report["runs"][0]
        assert (run["ok"], run["failed"]) == (3, 1)
        assert run["accuracy"] == pytest.approx(2 / 3)  # Paris, Shakespeare right; "3" wrong
        rows = {
            json.loads(x)["id"]: json.loads(x)
            for x in (out / "results" / "single.jsonl").read_text().splitlines()
        }
        assert rows["q3"]["status"] == "failed" and "LLMUnavailable" in rows["q3"]["error"]
        assert rows["q1"]["transcript_ref"] == "transcripts/single.jsonl#q1" and rows["q1"]["calls"] == 1
        assert [p["config"]["protocol"] for p in gateway.posts] == ["single", "cot"]
        assert gateway.posts[0]["items"][0] == {
            "id": "q1",
            "question": QUESTIONS[0]["question"],
            "answers": ["Paris"],
        }
        assert Workspace(out).load_batch_state("single") is None  # finished batches are forgotten

        gateway.fail_questions = set()
        outcome = await evaluate(
            req(nq_dataset, out, protocols=["single", "cot"]), batch_client=client, poll_interval_s=0.02
        )
        # Only the failed item of each run was submitted again.
        assert [[it["id"] for it in p["items"]] for p in gateway.posts[2:]] == [["q3"], ["q3"]]
        assert all(r["ok"] == 4 for r in outcome.report["runs"])
    finally:
        await client.aclose()


async def test_resume_polls_the_submitted_batch_instead_of_resubmitting(
    gateway: ContractGateway, nq_dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "resume"
    client = AsyncParleyClient(gateway.url, api_key=KEY)
    try:
        # An earlier invocation submitted a batch with the first two items and was interrupted.
        items = load_dataset(nq_dataset).items[:2]
        created = await client.submit_batch(
            batch_items(items), DebateConfig(protocol="single").model_dump(mode="json")
        )
        Workspace(out).save_batch_state(
            "single", {"batch_id": created.batch_id, "ids": [i.id for i in items]}
        )
        outcome = await evaluate(
            req(nq_dataset, out, protocols=["single"]), batch_client=client, poll_interval_s=0.02
        )
        # The saved batch was polled, not resubmitted; only the items it did not hold were submitted.
        assert [[it["id"] for it in p["items"]] for p in gateway.posts] == [["q1", "q2"], ["q3", "q4"]]
        assert outcome.report["runs"][0]["ok"] == 4

        # A batch the gateway no longer knows (404) is submitted again.
        Workspace(out).save_batch_state("single", {"batch_id": "bat-gone", "ids": []})
        (out / "results" / "single.jsonl").unlink()
        outcome = await evaluate(
            req(nq_dataset, out, protocols=["single"]), batch_client=client, poll_interval_s=0.02
        )
        assert len(gateway.posts) == 3 and outcome.report["runs"][0]["ok"] == 4
    finally:
        await client.aclose()


async def test_wrong_key_is_a_clear_error(gateway: ContractGateway) -> None:
    client = AsyncParleyClient(gateway.url, api_key="wrong")
    try:
        with pytest.raises(ParleyError, match="401: missing or wrong API key"):
            await client.get_batch("bat-1")
    finally:
        await client.aclose()


@pytest.mark.slow
async def test_against_the_real_gateway(nq_dataset: Path, tmp_path: Path) -> None:
    support = pytest.importorskip("tests.api.support")
    if support.redis_binary() is None:
        pytest.skip("redis-server not installed")
    from api.settings import ApiSettings
    from tests.evaluation.conftest import scripted_reply

    digest = hashlib.sha256(KEY.encode()).hexdigest()
    with ScriptedLLM() as llm:
        llm.on(lambda body: True, scripted_reply)
        redis_server = support.RedisServer(tmp_path / "redis").start()
        try:
            settings = ApiSettings(redis_url=redis_server.url, keys={"eval": digest})
            with (
                support.ApiServer(settings) as api,
                support.WorkerProcess(
                    support.worker_env(redis_server.url, llm.base_url), tmp_path / "worker.log"
                ),
            ):
                client = AsyncParleyClient(api.url, api_key=KEY)
                try:
                    outcome = await evaluate(
                        req(nq_dataset, tmp_path / "real", protocols=["single"]),
                        batch_client=client,
                        poll_interval_s=0.1,
                    )
                finally:
                    await client.aclose()
        finally:
            redis_server.stop()
    run = outcome.report["runs"][0]
    assert (run["ok"], run["failed"]) == (4, 0)
    assert run["accuracy"] == pytest.approx(0.5)
    assert run["calls_per_q"] == 1.0
