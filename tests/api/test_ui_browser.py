"""The ``/ui`` page in a real headless Chromium against the real stack.

redis-server, the API under uvicorn, a Celery worker process, the scripted LLM and a scripted
retriever that speaks the retriever's HTTP protocol (``POST /v1/pools``) with a fixed pool, so the
page has knowledge cards to show, one of them with markup in its title. The browser reaches the API
through a small TCP proxy that can cut every open connection, which is how the tests drop a live
event stream for real.

Debian's ``chromium`` and ``chromium-driver`` are driven with Selenium; both binaries are given
explicitly, so nothing is downloaded. Without them the tests skip with the install hint.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from services.knowledge import KnowledgeItem, KnowledgePool
from tests.api.conftest import KEY_A, KEY_B
from tests.api.support import (
    JUDGE,
    SELECT,
    SUMMARY,
    ApiServer,
    RedisServer,
    WorkerProcess,
    script_echo,
    wait_status,
    worker_env,
)
from tests.retriever.support import AppServer
from tests.support.scripted_llm import ScriptedLLM

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL_HINT = "needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver)"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
]
# Set to a folder (e.g. docs/img) to keep the README's screenshots; otherwise they go to a tmp dir.
SCREENSHOT_DIR = os.environ.get("PARLEY_UI_SCREENSHOT_DIR")
WAIT_S = 90

MARKUP_TITLE = '<img src=x onerror="window.__pwned=3">Moon landing'


def scripted_pool(question: str) -> KnowledgePool:
    """The fixed pool the scripted retriever answers with: two Wikipedia passages, two web results."""
    items = [
        KnowledgeItem(
            n=1,
            source="wikipedia",
            title="Paris",
            text="Paris is the capital and largest city of France, on the Seine.",
            url="https://en.wikipedia.org/wiki/Paris",
            score=0.9,
        ),
        KnowledgeItem(
            n=2,
            source="wikipedia",
            title="France",
            text="France is a country in Western Europe; its capital is Paris.",
            url="https://en.wikipedia.org/wiki/France",
            score=0.8,
        ),
        KnowledgeItem(
            n=3,
            source="web",
            title=MARKUP_TITLE,
            text="<script>window.__pwned=4</script> Apollo 11 landed on the Moon on 20 July 1969.",
            url="javascript:window.__pwned=5",
            score=0.5,
        ),
        KnowledgeItem(
            n=4,
            source="web",
            title="Lyon – a city in France",
            text="Lyon is France's third-largest city.",
            url="https://example.org/lyon",
            score=0.4,
        ),
    ]
    return KnowledgePool(pool_id=f"pool-{abs(hash(question))}", question=question, items=items)


def scripted_retriever_app() -> FastAPI:
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/pools", response_model=KnowledgePool)
    async def pools(body: dict[str, Any]) -> KnowledgePool:
        pool = scripted_pool(str(body["question"]))
        if body.get("search_text"):
            # A debater's search finds one passage the question's pool lacks.
            found = KnowledgeItem(
                n=5, source="wikipedia", title="Seine", text="The Seine flows through Paris to the sea."
            )
            pool.items.insert(2, found)
        return pool

    return app


class DroppingProxy:
    """A TCP proxy in front of the API; ``drop_all()`` cuts every open connection (a network drop)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._conns += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def drop_all(self) -> int:
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        return len(conns) // 2

    def close(self) -> None:
        self._stop = True
        self.listener.close()
        self.drop_all()


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def retriever_url() -> Iterator[str]:
    with AppServer(scripted_retriever_app(), startup_timeout_s=30) as server:
        yield server.url


@pytest.fixture(scope="module")
def worker(
    redis_server: RedisServer, llm: ScriptedLLM, retriever_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    env = worker_env(redis_server.url, llm.base_url, retriever_url)
    with WorkerProcess(env, tmp_path_factory.mktemp("uiworker") / "worker.log", concurrency=2) as proc:
        yield proc


@pytest.fixture(scope="module")
def proxy(api: ApiServer) -> Iterator[DroppingProxy]:
    p = DroppingProxy(api.port)
    yield p
    p.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip(INSTALL_HINT)
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extra")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    home = tmp_path_factory.mktemp("chromium")
    downloads = home / "downloads"
    downloads.mkdir()
    options = Options()
    options.binary_location = CHROMIUM
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={home / 'profile'}"]:
        options.add_argument(flag)
    options.add_experimental_option(
        "prefs", {"download.default_directory": str(downloads), "download.prompt_for_download": False}
    )
    service = Service(executable_path=CHROMEDRIVER, log_output=str(home / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_script_timeout(30)
    driver.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
    )
    driver.downloads = downloads
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser: Any, proxy: DroppingProxy, worker: WorkerProcess) -> Iterator[Any]:
    """The browser on a fresh /ui tab session (no key stored yet)."""
    browser.get(proxy.url + "/ui#/ask")
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()  # a fresh start without a key: the page asks for one
    yield browser


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    out = Path(SCREENSHOT_DIR) if SCREENSHOT_DIR else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    return out


# ------------------------------------------------------------------------------------------- helpers
def wait_for(driver: Any, condition: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # element not there yet, stale after a re-render
            last_error = exc
        time.sleep(0.1)
    banner = driver.execute_script("return document.getElementById('error').textContent")
    shown = driver.execute_script("return document.getElementById('main').innerText")[:3000]
    raise AssertionError(
        f"timed out waiting for {what} (page error: {banner!r}; last: {last_error!r}); page:\n{shown}"
    )


def js(driver: Any, script: str, *args: Any) -> Any:
    return driver.execute_script(script, *args)


def text_of(driver: Any, selector: str) -> str:
    return str(
        js(driver, "const e = document.querySelector(arguments[0]); return e ? e.textContent : ''", selector)
    )


def count(driver: Any, selector: str) -> int:
    return int(js(driver, "return document.querySelectorAll(arguments[0]).length", selector))


def enter_key(driver: Any, key: str) -> None:
    from selenium.webdriver.common.by import By

    form = wait_for(driver, lambda: driver.find_element(By.ID, "key-form").is_displayed(), "the key prompt")
    assert form
    driver.find_element(By.ID, "key-input").send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "#key-form button").click()
    wait_for(
        driver, lambda: js(driver, "return sessionStorage.getItem('parley.apiKey')") == key, "key stored"
    )


def set_field(driver: Any, form: str, name: str, value: str) -> None:
    js(
        driver,
        "const f = document.querySelector(arguments[0]).elements[arguments[1]]; f.value = arguments[2];",
        form,
        name,
        value,
    )


def script_debate(
    llm: ScriptedLLM, verdicts: list[str], answer: str = "Paris", searches: list[str] | None = None
) -> None:
    """MADKE in the paper's prompts: picks [1] and [2], answers ``answer``, the judge says ``verdicts``;
    ``searches`` are the debaters' searches during the debate, in the order they are asked."""
    llm.reset()
    if searches is not None:
        llm.on("write one search for it", searches)
    llm.on(SELECT, "The most helpful knowledge is [1] and [2].")
    llm.on(JUDGE, verdicts)
    llm.on(SUMMARY, f"All agents agree. The final answer is [{answer}].")
    llm.on("Question:", f"Paris is the capital, as the knowledge says. The answer is [{answer}].")


def sse_events(client: httpx.Client, job_id: str) -> list[dict[str, str]]:
    """The job's whole event stream as the API serves it (ids and types), for comparison."""
    events: list[dict[str, str]] = []
    current: dict[str, str] = {}
    with client.stream("GET", f"/v1/debates/{job_id}/events", timeout=60) as resp:
        for line in resp.iter_lines():
            if not line:
                if "event" in current:
                    events.append(current)
                current = {}
            elif not line.startswith(":"):
                field, _, value = line.partition(":")
                current[field] = value.removeprefix(" ")
    return events


def ask(driver: Any, question: str, **config: str) -> str:
    from selenium.webdriver.common.by import By

    driver.find_element(By.ID, "question").send_keys(question)
    for name, value in config.items():
        set_field(driver, "#ask-form", name, value)
    driver.find_element(By.ID, "ask-submit").click()
    url = wait_for(
        driver, lambda: "#/debate/job_" in driver.current_url and driver.current_url, "the job view"
    )
    return str(url).rsplit("/", 1)[-1]


# --------------------------------------------------------------------------------------------- tests
def test_ask_and_watch_rounds_verdicts_and_answer_live(
    page: Any, scripted: ScriptedLLM, alice: httpx.Client, shots: Path
) -> None:
    script_debate(scripted, ["They disagree on the wording. [No]", "The agents agree. [Yes]"])
    scripted.latency_s = 0.3
    enter_key(page, KEY_A)  # the page asks for the key once, up front
    # The form offers what the API's own schema says: every protocol, DebateConfig's defaults.
    schema = alice.get("/openapi.json").json()["components"]["schemas"]["DebateConfig"]["properties"]
    offered = wait_for(
        page,
        lambda: js(
            page,
            "return [...document.querySelectorAll('#ask-form [name=protocol] option')].map(o => o.value)",
        ),
        "the ask form",
    )
    assert offered == schema["protocol"]["enum"]
    assert js(page, "return document.querySelector('#ask-form [name=rounds]').value") == str(
        schema["rounds"]["default"]
    )
    job_id = ask(page, "What is the capital of France?", rounds="3")

    wait_for(page, lambda: count(page, "#pool .card") == 4, "the pool cards")
    wait_for(page, lambda: count(page, '.round[data-round="1"] .verdict'), "round 1's verdict")
    assert "no consensus" in text_of(page, '.round[data-round="1"] .verdict')
    assert text_of(page, "#status") in {"debating", "completed"}
    if SCREENSHOT_DIR:
        wait_for(page, lambda: count(page, '.round[data-round="2"] .call'), "round 2 underway")
        page.save_screenshot(str(shots / "ui-live-debate.png"))
    wait_for(page, lambda: text_of(page, "#status") == "completed", "completed")
    wait_for(page, lambda: count(page, "#records .record"), "the transcript records")

    assert text_of(page, "#final .final-answer") == "Paris"
    assert "summarizer" in text_of(page, "#final .answer-source")
    verdict2 = text_of(page, '.round[data-round="2"] .verdict')
    assert "LLM yes" in verdict2 and "rule yes" in verdict2 and "consensus, stop" in verdict2
    agent = '.round[data-round="2"] .agent[data-agent="1"]'
    assert text_of(page, f'{agent} .call[data-role="debater"] .answer strong') == "Paris"
    assert "as the knowledge says" in text_of(page, f'{agent} .call[data-role="debater"] .reply')
    assert [text_of(page, f'{agent} .chip[data-n="{n}"]') for n in (1, 2)] == ["[1]", "[2]"]
    # The latest round's picks are highlighted on the pool: items 1 and 2, by both agents.
    selected = js(page, "return [...document.querySelectorAll('#pool .card.selected')].map(c => c.dataset.n)")
    assert selected == ["1", "2"]
    assert text_of(page, '#pool .card[data-n="1"] header').endswith("A1A2")

    job = alice.get(f"/v1/debates/{job_id}").json()
    result = job["result"]
    assert count(page, "#rounds .call") == len(result["transcript"])  # one per LLM call, none twice
    assert count(page, "#records .record") == len(result["transcript"])
    for role, usage in result["usage_by_role"].items():
        cells = js(
            page,
            "return [...document.querySelectorAll(`#usage tr[data-role='${arguments[0]}'] td`)]"
            ".map(td => td.textContent)",
            role,
        )
        assert cells[:4] == [
            role,
            str(usage["calls"]),
            str(usage["prompt_tokens"]),
            str(usage["completion_tokens"]),
        ]
    # The raw record of a call shows its prompt messages and reply; the JSON link is the job document.
    first = "#records .record:first-of-type"
    js(page, f"document.querySelector('{first}').open = true")
    prompt = js(
        page,
        "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent)",
        f"{first} .message pre",
    )
    assert prompt == [m["content"] for m in result["transcript"][0]["messages"]]
    assert "What is the capital of France?" in prompt[-1]
    assert text_of(page, f"{first} .raw-reply") == result["transcript"][0]["text"]
    linked = page.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(document.getElementById('json-link').href)"
        ".then(r => r.json()).then(done, e => done(String(e)))"
    )
    assert linked["job_id"] == job_id and len(linked["result"]["transcript"]) == len(result["transcript"])


def test_a_dropped_stream_resumes_from_the_last_event_without_loss_or_repeats(
    page: Any, scripted: ScriptedLLM, alice: httpx.Client, proxy: DroppingProxy
) -> None:
    script_debate(scripted, ["[No]", "[No]", "[Yes]"])
    scripted.latency_s = 0.5
    enter_key(page, KEY_A)
    job_id = ask(page, "What is the capital of France, really?", rounds="3")
    wait_for(page, lambda: count(page, '.round[data-round="1"] .verdict'), "round 1")
    assert text_of(page, "#status") == "debating"
    assert count(page, "#pool .card") == 4  # from pool.ready, long before the result exists
    assert proxy.drop_all() >= 1  # the live stream (and any idle connection) is cut
    wait_for(
        page,
        lambda: int(js(page, "return +document.getElementById('live').dataset.connections")) >= 2,
        "a reconnect",
    )
    wait_for(page, lambda: text_of(page, "#status") == "completed", "completed", timeout=WAIT_S)
    wait_for(page, lambda: count(page, "#records .record"), "the transcript records")

    served = sse_events(alice, job_id)
    live = js(page, "return {...document.getElementById('live').dataset}")
    assert int(live["events"]) == len(served)  # every event shown once: none lost, none repeated
    assert live["lastEventId"] == served[-1]["id"]
    result = alice.get(f"/v1/debates/{job_id}").json()["result"]
    assert result["rounds"] == 3
    assert count(page, "#rounds .call") == len(result["transcript"])
    assert count(page, ".round .verdict") == 3

    # A reload reads the stream again from the start and shows the same debate.
    page.refresh()
    wait_for(page, lambda: count(page, "#records .record") == len(result["transcript"]), "reloaded view")
    assert count(page, "#rounds .call") == len(result["transcript"])
    assert js(page, "return +document.getElementById('live').dataset.events") == len(served)


def test_cancel_is_a_button(page: Any, scripted: ScriptedLLM, alice: httpx.Client) -> None:
    script_debate(scripted, ["[No]"])
    scripted.latency_s = 1.0
    enter_key(page, KEY_A)
    job_id = ask(page, "A question that takes long?", rounds="10")
    from selenium.webdriver.common.by import By

    wait_for(page, lambda: count(page, "#rounds .call"), "the first call")
    page.find_element(By.ID, "cancel").click()
    wait_for(page, lambda: text_of(page, "#status") == "cancelled", "cancelled")
    wait_for(page, lambda: "cancelled" in text_of(page, "#final"), "the cancellation shown")
    assert not page.find_element(By.ID, "cancel").is_displayed()
    assert alice.get(f"/v1/debates/{job_id}").json()["status"] == "cancelled"
    wait_for(page, lambda: text_of(page, "#live") == "finished", "the stream closed")


def test_open_a_finished_debate_from_the_list_and_by_id(
    page: Any, scripted: ScriptedLLM, alice: httpx.Client
) -> None:
    from selenium.webdriver.common.by import By

    script_debate(scripted, ["[Yes]"], answer="Paris")
    job_id = alice.post(
        "/v1/debates", json={"question": "Which city is the capital of France?", "config": {"rounds": 2}}
    ).json()["job_id"]
    job = wait_status(alice, job_id, {"completed"})
    enter_key(page, KEY_A)
    page.get(page.current_url.split("#")[0] + "#/debates")
    link = wait_for(
        page, lambda: page.find_element(By.CSS_SELECTOR, f'tr[data-job="{job_id}"] a'), "the list row"
    )
    assert link.text == "Which city is the capital of France?"
    link.click()
    wait_for(page, lambda: count(page, "#records .record") == len(job["result"]["transcript"]), "the records")
    assert text_of(page, "#debate-question") == "Which city is the capital of France?"
    assert text_of(page, "#final .final-answer") == "Paris"
    assert text_of(page, "#live") == "finished"
    assert count(page, "#pool .card") == 4

    page.get(page.current_url.split("#")[0] + "#/ask")
    page.find_element(By.CSS_SELECTOR, "#open-debate input").send_keys(job_id)
    page.find_element(By.CSS_SELECTOR, "#open-debate button").click()
    wait_for(page, lambda: text_of(page, "#final .final-answer") == "Paris", "the debate opened by id")


def test_a_debaters_search_shows_on_the_pool_and_in_its_round(
    page: Any, scripted: ScriptedLLM, alice: httpx.Client
) -> None:
    script_debate(scripted, ["[No]", "[Yes]"], searches=['{"search": "river of Paris"}', '{"search": ""}'])
    config = {"rounds": 2, "sequential": True, "debate_search": {"per_agent": 1, "items_per_search": 1}}
    job_id = alice.post(
        "/v1/debates", json={"question": "Which river flows through Paris?", "config": config}
    ).json()["job_id"]
    job = wait_status(alice, job_id, {"completed"})
    assert [it["title"] for it in job["result"]["pool"]["items"]][-1] == "Seine"
    enter_key(page, KEY_A)
    page.get(page.current_url.split("#")[0] + f"#/debate/{job_id}")
    wait_for(page, lambda: count(page, "#pool .card") == 5, "the grown pool")
    assert "found by A1's search after round 1: river of Paris" in text_of(
        page, '#pool .card[data-n="5"] .found-by'
    )
    search = text_of(page, '.round[data-round="1"] .pool-search')
    assert "Agent 1 searched" in search and "[5] Seine" in search


def test_markup_from_the_model_and_the_web_renders_as_text(
    page: Any, scripted: ScriptedLLM, alice: httpx.Client
) -> None:
    evil = "<script>window.__pwned=1</script>"
    scripted.reset()
    scripted.on(SELECT, "The most helpful knowledge is [3].")
    scripted.on(JUDGE, '<img src=x onerror="window.__pwned=2"> [Yes]')
    scripted.on(SUMMARY, f"The final answer is [{evil}].")
    scripted.on("Question:", f"I say [{evil}] and also <b>bold</b>.")
    enter_key(page, KEY_A)
    job_id = ask(page, "Is <script>alert(1)</script> a question?", rounds="1")
    wait_for(page, lambda: count(page, "#records .record"), "the transcript records")
    assert alice.get(f"/v1/debates/{job_id}").json()["result"]["answer"] == evil

    assert js(page, "return window.__pwned === undefined")
    assert js(page, "return document.querySelectorAll('main script, main img, main b').length") == 0
    assert text_of(page, "#final .final-answer") == evil
    assert text_of(page, "#debate-question") == "Is <script>alert(1)</script> a question?"
    assert "<b>bold</b>" in text_of(page, '.round .agent .call[data-role="debater"] .reply')
    card = '#pool .card[data-n="3"]'
    assert text_of(page, f"{card} h4") == MARKUP_TITLE
    assert count(page, f"{card} h4 a") == 0  # a javascript: URL is not made a link
    assert "<script>window.__pwned=4</script>" in text_of(page, f"{card} .snippet")
    assert count(page, "#pool .card.selected") == 1


def test_a_batch_reaches_100_percent_with_table_accuracy_and_plot(
    page: Any, scripted: ScriptedLLM, alice: httpx.Client, shots: Path
) -> None:
    from selenium.webdriver.common.by import By

    scripted.reset()
    script_echo(scripted)  # each answer is the question's last word
    scripted.latency_s = 0.1
    # An earlier batch with another protocol, so the plot compares two protocols.
    other = [{"question": f"Name the city {w}?", "answers": [w]} for w in ("Paris", "Rome")]
    single = alice.post("/v1/batches", json={"items": other, "config": {"protocol": "single"}})
    assert single.status_code == 202, single.text
    single_id = single.json()["batch_id"]
    deadline = time.monotonic() + WAIT_S
    while alice.get(f"/v1/batches/{single_id}").json()["status"] != "completed":
        assert time.monotonic() < deadline, "the single-agent batch did not finish"
        time.sleep(0.2)

    enter_key(page, KEY_A)
    page.get(page.current_url.split("#")[0] + "#/batches")
    wait_for(
        page, lambda: page.find_element(By.CSS_SELECTOR, f'tr[data-batch="{single_id}"]'), "the batch list"
    )
    lines = [
        json.dumps({"id": "fr", "question": "Capital of France is Paris?", "answers": ["Paris"]}),
        json.dumps({"id": "it", "question": "Capital of Italy is Rome?", "answers": ["Rome"]}),
        json.dumps({"id": "es", "question": "Capital of Spain is Lisbon?", "answers": ["Madrid"]}),
        "Which river flows through Paris, the Seine?",
    ]
    page.find_element(By.ID, "batch-items").send_keys("\n".join(lines))
    set_field(page, "#batch-form", "knowledge", "none")
    set_field(page, "#batch-form", "rounds", "2")
    page.find_element(By.CSS_SELECTOR, "#batch-form button[type=submit]").click()
    url = wait_for(page, lambda: "#/batch/bat_" in page.current_url and page.current_url, "the batch view")
    batch_id = str(url).rsplit("/", 1)[-1]

    wait_for(
        page,
        lambda: js(page, "return document.getElementById('batch-progress')?.dataset.progress") == "1",
        "100 %",
    )
    wait_for(
        page, lambda: count(page, "#batch-table tbody tr[data-status=completed]") == 4, "the finished rows"
    )
    if SCREENSHOT_DIR:
        time.sleep(0.5)
        page.save_screenshot(str(shots / "ui-batch.png"))
    assert "4/4 finished (100%)" in text_of(page, "#batch-counts")
    marks = js(
        page,
        "return [...document.querySelectorAll('#batch-table tbody tr')].map(r => r.children[5].textContent)",
    )
    assert marks == ["✓", "✓", "✗", "—"]
    answers = js(
        page,
        "return [...document.querySelectorAll('#batch-table tbody td.answer')].map(td => td.textContent)",
    )
    assert answers == ["Paris", "Rome", "Lisbon", "Seine"]
    assert text_of(page, "#accuracy") == "67%"  # 2 of the 3 items with gold answers
    rows = [json.loads(x) for x in alice.get(f"/v1/batches/{batch_id}/results").text.splitlines()]
    mean = (
        sum(r["result"]["usage"]["prompt_tokens"] + r["result"]["usage"]["completion_tokens"] for r in rows)
        / 4
    )
    assert text_of(page, "#mean-tokens") in {str(math.floor(mean)), str(math.ceil(mean))}

    dots = wait_for(
        page,
        lambda: js(
            page,
            "const d = [...document.querySelectorAll('#plot svg circle[data-protocol]')];"
            "return d.length === 2 && d.map(c => c.dataset.protocol).sort()",
        ),
        "the plot with both protocols",
    )
    assert dots == ["madke", "single"]
    assert "madke" in text_of(page, "#plot svg") and "single" in text_of(page, "#plot svg")

    page.find_element(By.ID, "download").click()
    target = page.downloads / f"{batch_id}.jsonl"
    wait_for(page, target.exists, "the downloaded JSONL")
    assert [json.loads(x)["id"] for x in target.read_text().splitlines()] == ["fr", "it", "es", "3"]


def test_key_b_cannot_open_key_a_job(page: Any, scripted: ScriptedLLM, alice: httpx.Client) -> None:
    script_debate(scripted, ["[Yes]"])
    job_id = alice.post(
        "/v1/debates", json={"question": "Alice's private question?", "config": {"rounds": 1}}
    ).json()["job_id"]
    wait_status(alice, job_id, {"completed"})
    enter_key(page, KEY_B)
    page.get(page.current_url.split("#")[0] + f"#/debate/{job_id}")
    wait_for(page, lambda: "no debate" in text_of(page, "#error"), "the 404 shown")
    assert "Alice's private question?" not in js(page, "return document.body.textContent")
    page.get(page.current_url.split("#")[0] + "#/debates")
    wait_for(page, lambda: count(page, "#debate-list tbody tr"), "bob's list")
    assert count(page, f'tr[data-job="{job_id}"]') == 0
    assert "Alice's private question?" not in js(page, "return document.body.textContent")
