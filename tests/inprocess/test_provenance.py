"""What an in-process evaluation records of what produced it: the commit, the lock, the model (the
packaged weights' sha256), the index, the machine, and never a secret."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from inprocess.provenance import ROOT, code_version, collect, index_identity
from retriever.settings import RetrieverSettings
from services.llm import MODELS, LLMSettings, ServedModel

pytestmark = pytest.mark.integration  # git rev-parse runs as a process


def test_the_embedded_model_is_named_by_its_weights() -> None:
    served = ServedModel("http://127.0.0.1:9/v1", "qwen2.5-coder-1.5b", slots=4, context_tokens=4096)
    record = collect(LLMSettings(embedded_model="qwen2.5-coder-1.5b"), served, None)
    model = record["model"]
    assert model["kind"] == "embedded" and model["weights_sha256"] == MODELS["qwen2.5-coder-1.5b"].sha256
    assert model["quantization"] == "Q4_K_M" and model["slots"] == 4
    assert record["index"] is None and record["machine"]["cpus"] >= 1


def test_an_endpoint_is_recorded_without_its_credentials() -> None:
    settings = LLMSettings(
        base_url="https://user:hunter2@llm.example:8443/v1?token=abc", model="qwen-72b", api_key="sk-SECRET"
    )
    record = collect(settings, None, None, retriever_url="http://retriever:8001")
    text = json.dumps(record)
    assert "hunter2" not in text and "sk-SECRET" not in text and "token=abc" not in text
    assert record["model"]["base_url"] == "https://llm.example:8443/v1"
    assert record["index"] == {
        "service": "http://retriever:8001/"
    }  # as services.chat_model.redact_url writes it


def test_the_code_is_the_checkout_commit_and_the_lock_hash() -> None:
    code = code_version(ROOT)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert code["commit"] == head.stdout.strip() and isinstance(code["modified"], bool)
    assert len(code["lock_sha256"]) == 64


def test_the_index_is_what_its_build_recorded(tmp_path: Path) -> None:
    settings = RetrieverSettings(data_dir=tmp_path)
    settings.manifest_path.parent.mkdir(parents=True, exist_ok=True)
    settings.manifest_path.write_text(
        json.dumps({"collection": "c", "passages": 12, "encoder": "onnx-int8", "corpora": {"vital": {}}})
    )
    assert index_identity(settings) == {
        "collection": "c",
        "passages": 12,
        "encoder": "onnx-int8",
        "corpora": ["vital"],
        "rerank_model": None,
    }
