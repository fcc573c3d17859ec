"""Pack `parley index encode` shards into the int8 file that ships in retriever/data/.

    HF_HUB_OFFLINE=1 PARLEY_RETRIEVER_EMBEDDING_MODEL=all-mpnet-base-v2 PARLEY_RETRIEVER_ENCODER=onnx-fp32 \
        .venv/bin/parley index encode --out /tmp/mpnet-shards
    .venv/bin/python scripts/pack_vectors.py /tmp/mpnet-shards retriever/data/vital-all-mpnet-base-v2.int8.npz

Prints the rows, the worst cosine between the packed and the original vectors and the sha256 to record
in ``retriever.shipped_vectors.SHIPPED``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from retriever.shipped_vectors import dequantize, quantize, save


def main() -> None:
    shards, out = Path(sys.argv[1]), Path(sys.argv[2])
    files = sorted(shards.glob("*.npy")) if shards.is_dir() else [shards]
    vectors = np.vstack([np.load(f) for f in files]).astype(np.float32)
    digest = save(out, vectors)
    codes, scale = quantize(vectors)
    worst = float(((dequantize(codes, scale) * vectors).sum(axis=1)).min())
    print(f"rows {vectors.shape[0]}, dim {vectors.shape[1]}, worst cosine {worst:.6f}, sha256 {digest}")


if __name__ == "__main__":
    main()
