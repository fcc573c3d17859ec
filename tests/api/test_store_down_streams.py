"""The result lines of a batch, when the job store fails mid-stream, end with one line that says so
(the lines before it stay valid) instead of a response broken off."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import redis.exceptions

from api.batches import until_store_fails


async def two_then_down() -> AsyncIterator[bytes]:
    yield b'{"index": 0}\n'
    yield b'{"index": 1}\n'
    raise redis.exceptions.TimeoutError("Timeout reading from socket")


def test_batch_lines_end_with_what_went_wrong() -> None:
    async def collect() -> list[bytes]:
        return [line async for line in until_store_fails(two_then_down(), "batch_x", 5)]

    lines = asyncio.run(collect())
    assert lines[:2] == [b'{"index": 0}\n', b'{"index": 1}\n']
    last = json.loads(lines[2])
    assert last == {
        "error": "the job store became unavailable mid-stream; fetch the results of batch_x again",
        "retry_after_s": 5,
    }
