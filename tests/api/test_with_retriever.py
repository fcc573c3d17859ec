"""The whole path with knowledge: API → Celery worker → the real retriever app over HTTP → scripted LLM.

The retriever serves a tiny dense index built with its own indexer from a slice of the real bundled
Wikipedia corpus in a temporary directory; the debaters' prompts must carry that knowledge.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.support import SELECT, RedisServer, WorkerProcess, wait_status, worker_env
from tests.support.scripted_llm import ScriptedLLM

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TITLES = ["Mona Lisa", "Leonardo da Vinci", "Tokyo", "Mount Everest"]
QUESTION = "who painted the mona lisa"


@pytest.fixture(scope="module")
def retriever_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    support = pytest.importorskip("tests.retriever.support")
    from retriever.app import create_app

    data_dir = tmp_path_factory.mktemp("retriever") / "index"
    settings = support.build_slice_index(data_dir, TITLES)
    with support.AppServer(create_app(settings)) as server:
        yield str(server.url)


@pytest.fixture(scope="module")
def knowledge_worker(
    redis_server: RedisServer, llm: ScriptedLLM, retriever_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    env = worker_env(redis_server.url, llm.base_url, retriever_url)
    with WorkerProcess(env, tmp_path_factory.mktemp("kw") / "worker.log", concurrency=1) as proc:
        yield proc


def test_debate_uses_the_pool_built_by_the_retriever(
    knowledge_worker: WorkerProcess, alice: httpx.Client, scripted: ScriptedLLM
) -> None:
    scripted.reset()
    scripted.on(SELECT, "The most helpful knowledge is [1] and [2].")
    scripted.on("respond with [Yes]", "[Yes]")
    scripted.on("summarize the final answer", "The final answer is [Leonardo da Vinci].")
    scripted.on("Question:", "The knowledge says so: the answer is [Leonardo da Vinci].")
    cfg = {"knowledge": "wikipedia", "k_wiki": 3, "k_web": 0}
    job_id = alice.post("/v1/debates", json={"question": QUESTION, "config": cfg}).json()["job_id"]
    job = wait_status(alice, job_id, {"completed", "failed"}, timeout_s=120)
    assert job["status"] == "completed", job
    result: dict[str, Any] = job["result"]
    assert result["answer"] == "Leonardo da Vinci"
    titles = [item["title"] for item in result["pool"]["items"]]
    assert 1 <= len(titles) <= 3 and "Mona Lisa" in titles
    assert all(item["source"] == "wikipedia" for item in result["pool"]["items"])
    selects = [r for r in result["transcript"] if r["role"] == "select"]
    assert len(selects) == 2 and all(r["selected"] == [1, 2] for r in selects)
    # The debaters saw the selected passages: the first pool item's text is in their prompts.
    first = result["pool"]["items"][0]["text"][:60]
    debater_prompts = [json.dumps(b) for b in scripted.requests if "Answer the question" in json.dumps(b)]
    assert debater_prompts and all(json.dumps(first)[1:-1] in p for p in debater_prompts)
    events = alice.get(f"/v1/debates/{job_id}/events", timeout=30).text
    assert "event: pool.ready" in events and '"items": ' in events


def test_a_debaters_search_grows_the_pool_through_the_real_retriever(
    knowledge_worker: WorkerProcess, alice: httpx.Client, scripted: ScriptedLLM
) -> None:
    """``debate_search`` through the gateway, the Celery worker and the retriever over HTTP: after a
    round without consensus agent 1 searches, the retriever's new items join the pool with their
    provenance, and the event stream says what was added."""
    scripted.reset()
    scripted.on(
        "write one search for it",
        ['{"search": "Leonardo da Vinci Italian polymath painter"}', '{"search": ""}'],
    )
    scripted.on(SELECT, "The most helpful knowledge is [1].")
    scripted.on("respond with [Yes]", ["[No]", "[Yes]"])
    scripted.on("summarize the final answer", "The final answer is [Leonardo da Vinci].")
    scripted.on("Question:", "The answer is [Leonardo da Vinci].")
    cfg = {
        "knowledge": "wikipedia",
        "k_wiki": 1,
        "k_web": 0,
        "sequential": True,
        "debate_search": {"per_agent": 1, "items_per_search": 2},
    }
    job_id = alice.post("/v1/debates", json={"question": QUESTION, "config": cfg}).json()["job_id"]
    job = wait_status(alice, job_id, {"completed", "failed"}, timeout_s=120)
    assert job["status"] == "completed", job
    items = job["result"]["pool"]["items"]
    first = [it for it in items if it["found_by"] is None]
    added = [it for it in items if it["found_by"] is not None]
    assert len(first) == 1 and 1 <= len(added) <= 2
    assert {it["title"] for it in added}.isdisjoint({first[0]["title"]})
    assert all(
        it["found_by"] == {"agent": 0, "round": 1, "query": "Leonardo da Vinci Italian polymath painter"}
        for it in added
    )
    assert [it["n"] for it in items] == list(range(1, len(items) + 1))
    events = alice.get(f"/v1/debates/{job_id}/events", timeout=30).text
    assert "event: pool.search" in events and added[0]["title"] in events


def test_openai_route_cites_the_wikipedia_pages_the_agents_selected(
    knowledge_worker: WorkerProcess, alice: httpx.Client, scripted: ScriptedLLM
) -> None:
    """Through the OpenAI SDK, with a pool built by the real retriever: the answer's ``url_citation``
    annotations are the Wikipedia pages of the items the agents selected, and nothing else."""
    import openai

    scripted.reset()
    scripted.on(SELECT, "The most helpful knowledge is [1] and [2].")
    scripted.on("respond with [Yes]", "[Yes]")
    scripted.on("summarize the final answer", "The final answer is [Leonardo da Vinci].")
    scripted.on("Question:", "The knowledge says so: the answer is [Leonardo da Vinci].")
    key = alice.headers["Authorization"].removeprefix("Bearer ")
    with openai.OpenAI(
        base_url=f"{str(alice.base_url).rstrip('/')}/v1", api_key=key, max_retries=0, timeout=120
    ) as client:
        out = client.chat.completions.create(
            model="parley-madke",
            messages=[{"role": "user", "content": QUESTION}],
            extra_body={"parley": {"knowledge": "wikipedia", "k_wiki": 3, "k_web": 0}},
        )
    message = out.choices[0].message
    assert message.content == "Leonardo da Vinci"
    annotations = [a.model_dump() for a in message.annotations or []]
    assert annotations, "the selected pool items carry Wikipedia URLs"
    pool = out.model_dump()["parley"]
    job = alice.get(f"/v1/debates/{pool['job_id']}").json()["result"]
    by_n = {item["n"]: item for item in job["pool"]["items"]}
    selected = {n for rec in job["transcript"] for n in (rec.get("selected") or [])}
    assert selected and selected <= {1, 2}
    expected = [by_n[n]["url"] for n in sorted(selected)]
    assert sorted(a["url_citation"]["url"] for a in annotations) == sorted(expected)
    for a in annotations:
        assert a["type"] == "url_citation"
        assert a["url_citation"]["url"].startswith("https://en.wikipedia.org/wiki/")
        assert a["url_citation"]["title"] in TITLES
        assert (a["url_citation"]["start_index"], a["url_citation"]["end_index"]) == (0, len(message.content))


def test_a_search_passage_is_written_searched_charged_and_recorded(
    knowledge_worker: WorkerProcess, alice: httpx.Client, scripted: ScriptedLLM, redis_server: RedisServer
) -> None:
    """``search_query: "passage"`` through the gateway, a Celery worker and the real retriever: the
    model writes the passage, the pool is searched with it (a vague question finds Mount Everest), its
    call heads the transcript, and the job is charged exactly what the result's usage says."""
    passage = "Mount Everest is the highest mountain on Earth above sea level, in the Himalayas."
    scripted.reset()
    scripted.on("Write two or three sentences from a Wikipedia article", passage)
    scripted.on(SELECT, "The most helpful knowledge is [1].")
    scripted.on("respond with [Yes]", "[Yes]")
    scripted.on("summarize the final answer", "The final answer is [Mount Everest].")
    scripted.on("Question:", "The knowledge says so: the answer is [Mount Everest].")
    question = "which one is it"
    cfg = {"knowledge": "wikipedia", "k_wiki": 1, "k_web": 0, "search_query": "passage", "seed": 3}
    job_id = alice.post("/v1/debates", json={"question": question, "config": cfg}).json()["job_id"]
    job = wait_status(alice, job_id, {"completed", "failed"}, timeout_s=120)
    assert job["status"] == "completed", job
    result: dict[str, Any] = job["result"]
    assert result["pool"]["question"] == question
    assert [item["title"] for item in result["pool"]["items"]] == ["Mount Everest"]
    search = result["transcript"][0]
    assert search["role"] == "search" and search["round"] == 0 and search["extra"]["search_text"] == passage
    assert [r["role"] for r in result["transcript"]].count("search") == 1
    [asked] = [b for b in scripted.requests if "Write two or three sentences" in json.dumps(b)]
    assert asked["temperature"] == 0 and asked["seed"] == 3 and asked["max_tokens"] == 96
    usage, by_role = result["usage"], result["usage_by_role"]
    assert by_role["search"]["calls"] == 1
    assert by_role["search"]["prompt_tokens"] + by_role["search"]["completion_tokens"] == (
        search["prompt_tokens"] + search["completion_tokens"]
    )
    # What the store charged the job, call by call, is what the result's usage adds up.
    r = redis_server.client()
    try:
        calls, tokens = r.hmget(f"parley:job:{job_id}", ["used_calls", "used_tokens"])
    finally:
        r.close()
    assert (int(calls or 0), int(tokens or 0)) == (
        usage["calls"],
        usage["prompt_tokens"] + usage["completion_tokens"],
    )
    assert usage["calls"] == len(scripted.requests)
    events = alice.get(f"/v1/debates/{job_id}/events", timeout=30).text
    assert '"role": "search"' in events
    assert events.index('"role": "search"') < events.index("event: pool.ready")
