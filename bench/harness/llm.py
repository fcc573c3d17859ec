"""Calls to an OpenAI-compatible model server as the studies make them, outside Parley's own client:
the experiment's prompt, greedy and seeded, with what the call cost."""

from __future__ import annotations

import time
from typing import Any

import httpx

# The fixed seed of every greedy call: a question's reply (and so what it changes) is deterministic
# for a given model and prompt.
SEED = 7


async def chat(client: httpx.AsyncClient, model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """One user message at temperature 0 and the fixed seed: the reply's text, tokens and seconds."""
    t = time.perf_counter()
    resp = await client.post(
        "/chat/completions",
        json={
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "seed": SEED,
            "max_tokens": max_tokens,
        },
    )
    resp.raise_for_status()
    body = resp.json()
    usage = body.get("usage") or {}
    return {
        "text": (body["choices"][0]["message"].get("content") or "").strip(),
        "prompt_tokens": int(usage.get("prompt_tokens", 0)),
        "completion_tokens": int(usage.get("completion_tokens", 0)),
        "seconds": time.perf_counter() - t,
    }
