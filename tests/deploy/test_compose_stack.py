"""The compose deployment run for real (``make test-compose``; never part of ``make test``).

Builds the images (scripts/build_images.sh), starts the stack with two workers and the scripted LLM in
a container from the Parley image, waits for every health check, then works through the published
gateway only while faults are injected with docker: a key-less request, a 50-item batch, a worker
killed mid-batch, redis restarted mid-batch, ``down`` then ``up``, a rolling restart of the workers,
then the day-two operations as docs/deployment.md writes them: a redis backup and restore, and an upgrade.
Every step's seconds go to var/compose-test/timings.json (docs/deployment.md carries them).

Environment: BASE_IMAGE, PARLEY_BUILD_CA, PARLEY_OFFLINE (see scripts/build_images.sh);
PARLEY_COMPOSE_SKIP_BUILD=1 uses the images already built; PARLEY_COMPOSE_EMBEDDED=0/1 forces the
Qdrant server or the embedded store (default: the server when its image is present).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "parleyct"
KEY = "compose-test-key"
QDRANT_IMAGE = "qdrant/qdrant:v1.13.4"

pytestmark = [
    pytest.mark.compose,
    pytest.mark.skipif(
        os.environ.get("PARLEY_TEST_COMPOSE") != "1",
        reason="builds images and runs docker: `make test-compose`",
    ),
]

TIMINGS: dict[str, float] = {}


def _docker() -> str:
    return os.environ.get("DOCKER") or shutil.which("docker") or "docker"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Stack:
    """docker-compose for one project, and the published gateway as the only way in."""

    def __init__(self, port: int, embedded: bool) -> None:
        self.port = port
        files = ["docker-compose.yml"]
        if embedded:
            files.append("docker-compose.embedded.yml")
        files.append("tests/deploy/compose.scripted-llm.yml")
        self.files = files
        self.env = {
            **os.environ,
            "PARLEY_API_KEYS": json.dumps({"ops": _sha256(KEY)}),
            "PARLEY_API_PUBLISH": str(port),
            "PARLEY_INDEX_BUILD_ARGS": "--limit 40 --no-bm25",
            "PARLEY_LLM_STRUCTURED_OUTPUT": "off",
            "COMPOSE_HTTP_TIMEOUT": "300",
        }
        self.http = httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {KEY}"}, timeout=30
        )

    def compose(self, *args: str, check: bool = True, timeout: float = 900) -> str:
        cmd = ["docker-compose", "-p", PROJECT]
        for f in self.files:
            cmd += ["-f", f]
        proc = subprocess.run(
            [*cmd, *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"docker-compose {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
        return proc.stdout

    def containers(self, service: str | None = None) -> list[str]:
        args = ["ps", "-q"] + ([service] if service else [])
        return [c for c in self.compose(*args).split() if c]

    def docker(self, *args: str) -> str:
        proc = subprocess.run([_docker(), *args], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def wait_healthy(self, timeout: float = 900) -> float:
        """Seconds until every container of the project reports healthy."""
        start = time.monotonic()
        while True:
            ids = self.containers()
            states = [
                self.docker("inspect", "--format", "{{.Name}} {{.State.Status}} {{.State.Health.Status}}", c)
                for c in ids
            ]
            if ids and all(s.split()[-1] == "healthy" for s in states):
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                logs = self.compose("logs", "--tail", "40", check=False)
                raise AssertionError(f"not healthy after {timeout} s: {states}\n{logs[-6000:]}")
            time.sleep(2)

    def submit_batch(self, n: int, tag: str) -> str:
        items = [
            {"id": f"{tag}-{i}", "question": f"What is the capital of France? ({tag} {i})"} for i in range(n)
        ]
        r = self.http.post("/v1/batches", json={"items": items, "config": {"rounds": 2}})
        assert r.status_code == 202, r.text
        return str(r.json()["batch_id"])

    def batch(self, batch_id: str) -> dict[str, Any]:
        for _ in range(30):  # the gateway may be reconnecting to a restarting redis
            try:
                r = self.http.get(f"/v1/batches/{batch_id}")
                if r.status_code == 200:
                    return dict(r.json())
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise AssertionError(f"batch {batch_id} unreadable")

    def wait_progress(self, batch_id: str, share: float) -> None:
        deadline = time.monotonic() + 300
        while self.batch(batch_id)["progress"] < share:
            assert time.monotonic() < deadline, "the batch made no progress"
            time.sleep(0.5)

    def wait_batch(self, batch_id: str, timeout: float = 900) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while (view := self.batch(batch_id))["status"] != "completed":
            assert time.monotonic() < deadline, f"batch not completed: {view}"
            time.sleep(1)
        return view

    def check_results(self, batch_id: str, n: int) -> list[dict[str, Any]]:
        """Every item once, completed, and no round of any debate run twice (transcript records unique)."""
        r = self.http.get(f"/v1/batches/{batch_id}/results")
        assert r.status_code == 200, r.text
        rows = [json.loads(line) for line in r.text.splitlines() if line.strip()]
        assert len(rows) == n
        assert len({row["id"] for row in rows}) == n
        assert len({row["job_id"] for row in rows}) == n
        assert [row["status"] for row in rows] == ["completed"] * n, [row.get("error") for row in rows]
        for row in rows:
            calls = [
                (rec.get("round"), rec.get("role"), rec.get("agent"), rec.get("step"))
                for rec in row["result"]["transcript"]
            ]
            assert len(calls) == len(set(calls)), f"{row['id']}: a call recorded twice {calls}"
        return rows


def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    if shutil.which("docker-compose") is None:
        pytest.fail("docker-compose is not installed (apt-get install -y docker.io docker-compose)")
    if os.environ.get("PARLEY_COMPOSE_SKIP_BUILD") != "1":
        start = time.monotonic()
        subprocess.run(["bash", "scripts/build_images.sh"], cwd=ROOT, check=True, timeout=3600)
        TIMINGS["image_build_s"] = time.monotonic() - start
    have_qdrant = (
        subprocess.run([_docker(), "image", "inspect", QDRANT_IMAGE], capture_output=True).returncode == 0
    )
    embedded = os.environ.get("PARLEY_COMPOSE_EMBEDDED", "0" if have_qdrant else "1") == "1"
    s = Stack(_free_port(), embedded)
    s.compose("down", "-v", "--remove-orphans", check=False)
    try:
        start = time.monotonic()
        s.compose("up", "-d", "--no-build", "--scale", "worker=2")
        s.wait_healthy()
        TIMINGS["stack_up_to_healthy_s"] = time.monotonic() - start
        yield s
    finally:
        out = ROOT / "var" / "compose-test"
        out.mkdir(parents=True, exist_ok=True)
        (out / "timings.json").write_text(json.dumps({k: round(v, 1) for k, v in TIMINGS.items()}, indent=2))
        (out / "logs.txt").write_text(s.compose("logs", "--no-color", check=False)[-2_000_000:])
        s.compose("down", "-v", "--remove-orphans", check=False)


def test_only_the_gateway_is_published(stack: Stack) -> None:
    published = []
    for c in stack.containers():
        ports = json.loads(stack.docker("inspect", "--format", "{{json .NetworkSettings.Ports}}", c)) or {}
        published += [(c, p) for p, binds in ports.items() if binds]
    api = stack.containers("api")
    assert [c for c, _ in published] == api and [p for _, p in published] == ["8000/tcp"]


def test_a_request_without_a_key_is_refused(stack: Stack) -> None:
    r = httpx.post(f"http://127.0.0.1:{stack.port}/v1/debates", json={"question": "Who?"}, timeout=10)
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("application/problem+json")


def test_a_50_item_batch_completes(stack: Stack) -> None:
    start = time.monotonic()
    batch = stack.submit_batch(50, "plain")
    stack.wait_batch(batch)
    TIMINGS["batch_50_s"] = time.monotonic() - start
    stack.check_results(batch, 50)


def test_a_worker_killed_mid_batch_loses_and_repeats_nothing(stack: Stack) -> None:
    start = time.monotonic()
    batch = stack.submit_batch(50, "kill")
    stack.wait_progress(batch, 0.2)
    victim = stack.containers("worker")[0]
    stack.docker("kill", victim)  # SIGKILL: no hand-back, the broker redelivers its jobs
    stack.wait_batch(batch)
    TIMINGS["batch_50_worker_killed_s"] = time.monotonic() - start
    stack.check_results(batch, 50)
    stack.docker("start", victim)


def test_redis_restarted_mid_batch_loses_nothing(stack: Stack) -> None:
    start = time.monotonic()
    batch = stack.submit_batch(50, "redis")
    stack.wait_progress(batch, 0.2)
    stack.compose("restart", "redis")
    stack.wait_batch(batch)
    TIMINGS["batch_50_redis_restarted_s"] = time.monotonic() - start
    stack.check_results(batch, 50)


def test_down_then_up_keeps_finished_results(stack: Stack) -> None:
    batch = stack.submit_batch(10, "persist")
    stack.wait_batch(batch)
    before = stack.check_results(batch, 10)
    start = time.monotonic()
    stack.compose("down")  # the volumes stay
    stack.compose("up", "-d", "--no-build", "--scale", "worker=2")
    stack.wait_healthy()
    TIMINGS["down_up_to_healthy_s"] = time.monotonic() - start
    after = stack.check_results(batch, 10)
    assert [r["result"]["answer"] for r in after] == [r["result"]["answer"] for r in before]


def test_a_rolling_restart_of_the_workers_loses_no_job(stack: Stack) -> None:
    start = time.monotonic()
    batch = stack.submit_batch(50, "rolling")
    stack.wait_progress(batch, 0.1)
    for worker in stack.containers("worker"):
        # SIGTERM: the worker hands its running jobs back, then is started again.
        stack.docker("restart", "--time", "180", worker)
        deadline = time.monotonic() + 180
        while stack.docker("inspect", "--format", "{{.State.Health.Status}}", worker).strip() != "healthy":
            assert time.monotonic() < deadline, "a restarted worker did not become healthy"
            time.sleep(2)
    stack.wait_batch(batch)
    TIMINGS["batch_50_rolling_restart_s"] = time.monotonic() - start
    stack.check_results(batch, 50)


# Day-two operations exactly as docs/deployment.md writes them (the volume carries the project name).


def _redis_volume_command(stack: Stack, backup_dir: Path, *command: str) -> None:
    """One of the documented backup/restore commands: the parley-redis image over the redis volume."""
    stack.docker(
        "run", "--rm", "--user", "root", "--entrypoint", command[0],
        "-v", f"{PROJECT}_redis-data:/data", "-v", f"{backup_dir}:/backup",
        "parley-redis:latest", *command[1:],
    )  # fmt: skip


def test_redis_backup_then_restore_brings_back_exactly_the_backed_up_jobs(
    stack: Stack, tmp_path: Path
) -> None:
    batch = stack.submit_batch(5, "backup")
    stack.wait_batch(batch)
    before = stack.check_results(batch, 5)
    start = time.monotonic()
    stack.compose("stop", "redis")
    _redis_volume_command(stack, tmp_path, "tar", "-C", "/data", "-czf", "/backup/redis-backup.tgz", ".")
    stack.compose("start", "redis")
    stack.wait_healthy()
    TIMINGS["redis_backup_s"] = time.monotonic() - start
    assert (tmp_path / "redis-backup.tgz").stat().st_size > 0

    later = stack.submit_batch(3, "after-backup")
    stack.wait_batch(later)
    later_jobs = [row["job_id"] for row in stack.check_results(later, 3)]

    start = time.monotonic()
    stack.compose("stop", "redis")
    _redis_volume_command(
        stack, tmp_path, "sh", "-c", "rm -rf /data/* && tar -C /data -xzf /backup/redis-backup.tgz"
    )
    stack.compose("start", "redis")
    stack.wait_healthy()
    TIMINGS["redis_restore_s"] = time.monotonic() - start

    after = stack.check_results(batch, 5)  # the gateway reconnects to the restored redis
    assert [(r["id"], r["job_id"], r["result"]["answer"]) for r in after] == [
        (r["id"], r["job_id"], r["result"]["answer"]) for r in before
    ]
    assert stack.http.get(f"/v1/batches/{later}").status_code == 404
    for job in later_jobs:
        assert stack.http.get(f"/v1/debates/{job}").status_code == 404
    assert stack.http.get(f"/v1/debates/{before[0]['job_id']}").status_code == 200


def _wait_container_healthy(stack: Stack, container: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while stack.docker("inspect", "--format", "{{.State.Health.Status}}", container).strip() != "healthy":
        assert time.monotonic() < deadline, f"{container} did not become healthy"
        time.sleep(2)


def test_an_upgrade_as_documented_loses_and_repeats_no_job(stack: Stack) -> None:
    if os.environ.get("PARLEY_COMPOSE_SKIP_BUILD") != "1":  # the rebuild: every layer cached
        start = time.monotonic()
        subprocess.run(["bash", "scripts/build_images.sh"], cwd=ROOT, check=True, timeout=3600)
        TIMINGS["upgrade_rebuild_s"] = time.monotonic() - start

    start = time.monotonic()
    batch = stack.submit_batch(50, "upgrade")
    stack.wait_progress(batch, 0.1)
    stack.compose("up", "-d", "--no-deps", "--no-build", "api", "retriever")
    for worker in stack.containers("worker"):
        stack.docker("restart", "--time", "180", worker)
        _wait_container_healthy(stack, worker)
    stack.wait_batch(batch)
    stack.wait_healthy()
    TIMINGS["upgrade_restart_one_at_a_time_s"] = time.monotonic() - start
    stack.check_results(batch, 50)

    # The alternative: recreate every worker replica at once (--force-recreate stands in for a new image).
    start = time.monotonic()
    batch = stack.submit_batch(50, "recreate")
    stack.wait_progress(batch, 0.1)
    stack.compose("up", "-d", "--no-deps", "--no-build", "--force-recreate", "--scale", "worker=2", "worker")
    stack.wait_batch(batch)
    stack.wait_healthy()
    TIMINGS["upgrade_recreate_workers_s"] = time.monotonic() - start
    stack.check_results(batch, 50)
    assert stack.http.get("/v1/batches").status_code == 200
