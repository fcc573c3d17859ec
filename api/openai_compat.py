"""The OpenAI chat-completions dialect of the gateway: model catalogue, request, error objects, chunks.

Parley is exposed as a set of "models", one per protocol (``parley-madke``, ``parley-self-consistency``,
…) and one per evaluation preset (``parley-mallm-simple``, ``parley-mad-ciar``, …). A request is turned
into the same ``DebateRequest`` the REST route takes, so its debate settings (the ``parley`` object,
sent by OpenAI SDKs as ``extra_body``) are validated exactly like a REST config. Progress becomes
``delta.reasoning_content`` (what chat front-ends render as "thinking"), the answer ``delta.content``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.problems import Problem
from engine.config import DebateConfig
from engine.registry import PROTOCOLS
from engine.result import DebateResult

MODEL_PREFIX = "parley-"


@dataclass(frozen=True)
class ModelEntry:
    """One model name: the debate configuration it stands for, before the request's own settings."""

    id: str
    description: str
    config: dict[str, Any]


# The evaluation presets as data (written by scripts/preset_models.py from evaluation/presets.py; the
# gateway does not import the harness): name, summary and debate configuration of each.
PRESETS: dict[str, dict[str, Any]] = {
    p["name"]: p
    for p in json.loads((Path(__file__).parent / "preset_models.json").read_text(encoding="utf-8"))
}


def _catalogue() -> dict[str, ModelEntry]:
    """Every protocol with its defaults, then every preset whose name is not already a protocol's."""
    out: dict[str, ModelEntry] = {}
    for name in PROTOCOLS:
        model = MODEL_PREFIX + name.replace("_", "-")
        out[model] = ModelEntry(model, f"the {name} protocol with Parley's defaults", {"protocol": name})
    for preset in PRESETS.values():
        model = MODEL_PREFIX + preset["name"]
        if model not in out:
            out[model] = ModelEntry(model, preset["summary"], dict(preset["config"]))
    # Short names for the two families of MALLM decisions.
    for alias, preset_name in (("mallm-voting", "mallm-simple"), ("mallm-consensus", "mallm-majority")):
        preset = PRESETS[preset_name]
        out[MODEL_PREFIX + alias] = ModelEntry(
            MODEL_PREFIX + alias, preset["summary"], dict(preset["config"])
        )
    return out


MODELS: dict[str, ModelEntry] = _catalogue()


def model_object(entry: ModelEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "object": "model",
        "created": 0,
        "owned_by": "parley",
        "description": entry.description,
    }


def find_model(name: str) -> ModelEntry:
    entry = MODELS.get(name)
    if entry is None:
        raise OpenAIError(
            404,
            f"The model `{name}` does not exist; GET /v1/models lists Parley's models "
            f"({', '.join(list(MODELS)[:6])}, …)",
            code="model_not_found",
            param="model",
        )
    return entry


class OpenAIError(Exception):
    """An error answered in OpenAI's shape (``{"error": {message, type, param, code}}``)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str | None = None,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_ or ERROR_TYPES.get(
            status, "server_error" if status >= 500 else "invalid_request_error"
        )
        self.code = code
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def from_problem(problem: Problem) -> OpenAIError:
    """A gateway problem in OpenAI's shape, same status and headers; the code is the problem's kind."""
    kind = problem.type.rsplit("/", 1)[-1].replace("-", "_") if problem.type != "about:blank" else None
    code = {401: "invalid_api_key", 404: "not_found"}.get(problem.status, kind)
    type_ = "insufficient_quota" if kind == "quota_exceeded" else None
    if kind == "quota_exceeded":
        code = "insufficient_quota"
    param = None
    errors = problem.extra.get("errors") or []
    if errors and isinstance(errors[0], dict):
        param = ".".join(str(p) for p in errors[0].get("loc", []) if p != "body") or None
    return OpenAIError(
        problem.status, problem.detail, type_=type_, code=code, param=param, headers=problem.headers
    )


def from_validation(errors: list[dict[str, Any]], prefix: str = "") -> OpenAIError:
    """Pydantic errors as one OpenAI error naming the first field (422, as on the REST routes)."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    where = ".".join([prefix, *loc] if prefix else loc)
    if first.get("type") == "json_invalid":
        return OpenAIError(400, "the body is not valid JSON", code="malformed_json")
    return OpenAIError(
        422, f"{where + ': ' if where else ''}{first.get('msg')}", code="validation", param=where or None
    )


class ChatMessage(BaseModel):
    """A message as OpenAI clients send it; content is text or a list of parts."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions``. OpenAI clients send many optional fields; the ones a debate
    cannot honour (several choices, tools, structured output, log probabilities) are refused when
    set, sampling knobs Parley has no equivalent for (``top_p``, penalties, ``stop``, ``user``) are
    accepted and not used."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(max_length=200)
    messages: list[ChatMessage] = Field(min_length=1, max_length=500)
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    seed: int | None = None
    n: int | None = None
    parley: dict[str, Any] | None = Field(
        default=None, description="debate settings (a DebateConfig without protocol), as extra_body"
    )

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


def refuse_unsupported(body: ChatCompletionRequest) -> None:
    """400 for an OpenAI option whose effect a debate cannot give, rather than silently ignoring it."""
    extra = body.model_extra or {}
    if body.n not in (None, 1):
        raise OpenAIError(400, "n: a debate gives one answer; ask for n=1", param="n", code="unsupported")
    for name in ("tools", "functions"):
        if extra.get(name):
            raise OpenAIError(400, f"{name}: Parley models do not call tools", param=name, code="unsupported")
    fmt = extra.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        raise OpenAIError(
            400, "response_format: Parley answers in text only", param="response_format", code="unsupported"
        )
    if extra.get("logprobs"):
        raise OpenAIError(400, "logprobs: not available from a debate", param="logprobs", code="unsupported")


def _text(message: ChatMessage, index: int) -> str:
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    parts = []
    for part in message.content:
        if part.get("type") != "text":
            raise OpenAIError(
                400,
                f"messages.{index}.content: only text parts are understood, not {part.get('type')!r}",
                param=f"messages.{index}.content",
                code="unsupported",
            )
        parts.append(str(part.get("text", "")))
    return "\n".join(parts)


def question_of(messages: list[ChatMessage]) -> str:
    """The last user message. No Parley protocol takes a conversation or a system prompt (a debate's
    prompts are its protocol's), so earlier turns are refused with a 400 instead of being dropped."""
    last = messages[-1]
    if last.role != "user":
        raise OpenAIError(
            400, f"the last message must be the user's question, not {last.role!r}", param="messages"
        )
    for i, message in enumerate(messages[:-1]):
        if message.role in ("system", "developer") and not _text(message, i).strip():
            continue  # an empty system prompt asks for nothing
        raise OpenAIError(
            400,
            f"messages.{i}: Parley debates one question; no protocol uses earlier turns or a "
            f"{message.role} prompt. Send only the question as one user message.",
            param=f"messages.{i}",
            code="unsupported_context",
        )
    question = _text(last, len(messages) - 1)
    if not question.strip():
        raise OpenAIError(400, "the user message is empty", param="messages")
    return question


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` on top of ``base``, nested settings (``mad``, ``mallm``) merged key by key."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def debate_config(entry: ModelEntry, body: ChatCompletionRequest) -> DebateConfig:
    """The model's configuration with the request's settings on top, validated like a REST config.

    ``temperature``, ``max_tokens`` (or ``max_completion_tokens``) and ``seed`` map onto the config;
    a value given in ``parley`` wins. The model fixes the protocol.
    """
    settings = dict(body.parley or {})
    if "protocol" in settings and settings["protocol"] != entry.config["protocol"]:
        raise OpenAIError(
            400,
            f"parley.protocol: the model {entry.id!r} is the {entry.config['protocol']!r} protocol; "
            "choose the protocol with `model`",
            param="parley.protocol",
        )
    mapped = {
        "temperature": body.temperature,
        "max_tokens": body.max_completion_tokens
        if body.max_completion_tokens is not None
        else body.max_tokens,
        "seed": body.seed,
    }
    for key, value in mapped.items():
        if value is not None:
            settings.setdefault(key, value)
    try:
        return DebateConfig.model_validate(merge(entry.config, settings))
    except ValidationError as exc:
        raise from_validation([dict(e) for e in exc.errors(include_url=False)], "parley") from exc


def completion_id(job_id: str) -> str:
    return f"chatcmpl-{job_id}"


def usage_object(result: DebateResult) -> dict[str, Any]:
    u = result.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }


def cited_numbers(result: DebateResult) -> list[int]:
    """The pool numbers the answer rests on: what the agents selected, else what their calls were shown."""
    selected = [n for rec in result.transcript for n in (rec.selected or [])]
    shown = [n for rec in result.transcript for n in rec.knowledge]
    return list(dict.fromkeys(selected or shown))


def citations(result: DebateResult, answer: str) -> list[dict[str, Any]]:
    """``url_citation`` annotations for the cited pool items that have a URL (each spans the answer)."""
    items = {it.n: it for it in result.pool.items}
    out = []
    for n in cited_numbers(result):
        item = items.get(n)
        if item is None or not item.url:
            continue
        out.append(
            {
                "type": "url_citation",
                "url_citation": {
                    "url": item.url,
                    "title": item.title,
                    "start_index": 0,
                    "end_index": len(answer),
                },
            }
        )
    return out


def parley_object(job_id: str, result: DebateResult | None, base_url: str) -> dict[str, Any]:
    """What Parley adds to a completion: the job, how the answer was reached, and where to read more."""
    base = base_url.rstrip("/")
    out: dict[str, Any] = {
        "job_id": job_id,
        "transcript": f"{base}/v1/debates/{job_id}",
        "viewer": f"{base}/ui/#/debate/{job_id}",
    }
    if result is not None:
        out.update(
            protocol=result.protocol,
            rounds=result.rounds,
            consensus=result.consensus,
            answer_source=result.answer_source,
        )
    return out


def completion(model: str, job_id: str, result: DebateResult, base_url: str, created: int) -> dict[str, Any]:
    """The whole debate as one ``chat.completion``."""
    answer = result.answer or ""
    return {
        "id": completion_id(job_id),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": answer,
                    "refusal": None,
                    "annotations": citations(result, answer),
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": usage_object(result),
        "system_fingerprint": None,
        "parley": parley_object(job_id, result, base_url),
    }


def chunk(
    model: str, job_id: str, created: int, delta: dict[str, Any], finish: str | None = None
) -> dict[str, Any]:
    return {
        "id": completion_id(job_id),
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def now() -> int:
    return int(time.time())


def _who(data: dict[str, Any]) -> str:
    agent = data.get("agent")
    return f"agent {int(agent) + 1}" if isinstance(agent, int) else str(data.get("role") or "")


def progress_text(event: str, data: dict[str, Any]) -> str | None:
    """One line of "thinking" for a debate event, or None for events a reader need not see."""
    r = data.get("round")
    if event == "job.queued":
        return "Queued.\n"
    if event == "pool.ready":
        titles = ", ".join(str(p.get("title") or "") for p in (data.get("pool") or [])[:10] if p.get("title"))
        return (
            f"Knowledge pool ready: {data.get('items', 0)} items" + (f" ({titles})" if titles else "") + ".\n"
        )
    if event == "turn.completed":
        role = data.get("role")
        if role == "select":
            picked = ", ".join(f"[{n}]" for n in data.get("selected") or []) or "none"
            return f"Round {r}, {_who(data)} selects knowledge {picked}.\n"
        if role == "judge" or data.get("answer") is None:
            return None
        return f"Round {r}, {_who(data)} ({role}): {data.get('answer')}\n"
    if event == "pool.search":
        if data.get("error"):
            return (
                f"Round {r}, {_who(data)} searched for {data.get('query')!r}: the retriever could not be "
                "reached; the debate goes on with the pool it has.\n"
            )
        added = (
            ", ".join(f"[{a.get('n')}] {a.get('title')}" for a in data.get("added") or []) or "nothing new"
        )
        return f"Round {r}, {_who(data)} searched for {data.get('query')!r}: {added}.\n"
    if event == "judge.verdict":
        return f"Round {r}, judge: {'consensus' if data.get('consensus') else 'no consensus yet'}.\n"
    if event == "round.completed":
        return f"Round {r} done.\n"
    return None
