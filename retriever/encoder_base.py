"""What every passage encoder shares: its typed error, the model's own text length limit and
sentence-transformers' mean pooling (numpy on ONNX Runtime, torch tensors on a GPU)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Max tokens per text when the model folder does not say (sentence-transformers' max_seq_length for
# all-MiniLM-L6-v2); a folder's sentence_bert_config.json overrides it (all-mpnet-base-v2: 384).
MAX_TOKENS = 256


class EncoderError(RuntimeError):
    """The encoder cannot be prepared or loaded; the message says why and what to do."""


def model_max_tokens(model_path: str) -> int:
    """The model's own text length limit (``max_seq_length`` in its sentence-transformers config)."""
    config = Path(model_path) / "sentence_bert_config.json"
    if config.exists():
        value = json.loads(config.read_text(encoding="utf-8")).get("max_seq_length")
        if isinstance(value, int) and value > 0:
            return value
    return MAX_TOKENS


def mean_pool_normalize(hidden: Any, mask: Any) -> Any:
    """Sentence-transformers' pooling for these models: the mean over real tokens, then L2 to unit length.

    One definition for every encoder: ``hidden`` (batch, tokens, dim) and the float ``mask`` (batch,
    tokens) may be numpy arrays (ONNX Runtime) or torch tensors on a GPU (the pipelined encoder pools
    there, so only the pooled vectors cross back to the host); only operations both libraries spell
    the same way are used. A text whose vector is all zeros stays zeros instead of dividing by zero.
    """
    weights = mask[..., None]
    pooled = (hidden * weights).sum(1) / weights.sum(1).clip(1e-9)
    norms = ((pooled * pooled).sum(1) ** 0.5)[:, None]
    return pooled / (norms + (norms == 0))
