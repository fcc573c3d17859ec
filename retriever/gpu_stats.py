"""Where a pipelined encoder's time goes (``PipelineStats``): the tokenizer's and the model's rates, end
to end, the start-up and the precision check, for the progress bar and the final report."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass
class PipelineStats:
    """Where an encoder's time went, cumulative over its calls."""

    precision: str
    device: str
    tokenize_workers: int
    passages: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    tokenize_s: float = 0.0  # summed over the workers
    model_s: float = 0.0  # the device's time in the model (CUDA events; wall time on a CPU)
    starved_s: float = 0.0  # the model thread waiting for tokenized windows
    wall_s: float = 0.0
    load_s: float | None = None  # importing torch + transformers and loading the weights
    first_batch_s: float | None = None  # from the first call to the first batch on the device
    precision_cosine: float | None = None  # lowest cosine to fp32 on the checked batch
    fell_back: bool = False

    @property
    def tokenizer_rate(self) -> float:
        """Passages/s the tokenizer stage sustains with all its workers busy."""
        return self.passages * self.tokenize_workers / self.tokenize_s if self.tokenize_s > 0 else 0.0

    @property
    def model_rate(self) -> float:
        """Passages/s the model sustains when it never waits for tokens."""
        return self.passages / self.model_s if self.model_s > 0 else 0.0

    running_since: float | None = None  # the call in progress (for a live end-to-end rate)

    @property
    def rate(self) -> float:
        wall = self.wall_s + (time.perf_counter() - self.running_since if self.running_since else 0.0)
        return self.passages / wall if wall > 0 else 0.0

    def line(self) -> str:
        """One progress line: which stage is the bottleneck is the smaller of the first two rates."""
        return (
            f"tokenizer {self.tokenizer_rate:,.0f} p/s ({self.tokenize_workers} "
            f"worker{'s' if self.tokenize_workers != 1 else ''}) · "
            f"model {self.model_rate:,.0f} p/s ({self.device}, {self.precision}) · "
            f"end to end {self.rate:,.0f} p/s · model waited {self.starved_s:.1f} s for tokens"
        )

    def summary(self) -> str:
        """The final report of a run, with the start-up and the precision check."""
        parts = [
            f"{self.passages:,} passages in {self.wall_s:.1f} s: {self.line()}",
            f"padding {100 * (1 - self.tokens / self.padded_tokens):.1f}% of computed tokens"
            if self.padded_tokens
            else "",
            f"model loaded in {self.load_s:.1f} s" if self.load_s is not None else "",
            f"first batch on the device {self.first_batch_s:.1f} s after the start"
            if self.first_batch_s is not None
            else "",
            f"{self.precision} vs fp32: lowest cosine {self.precision_cosine:.6f}"
            + (" (below the bound: fell back to fp32)" if self.fell_back else "")
            if self.precision_cosine is not None
            else "",
        ]
        return "; ".join(p for p in parts if p)

    def as_dict(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in self.__dict__.items()},
            "tokenizer_rate": self.tokenizer_rate,
            "model_rate": self.model_rate,
            "rate": self.rate,
        }
