"""bench.speculative without a server: the variants' options, the summary's arithmetic, bad arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.speculative import main, markdown, summarise, variant_args


def rows(*walls_and_texts: tuple[float, str]) -> list[dict[str, object]]:
    return [
        {"completion_tokens": 10, "decode_tokens_per_s": 10.0 / w, "wall_s": w, "text": t}
        for w, t in walls_and_texts
    ]


def test_the_summary_compares_each_variant_with_plain_decoding() -> None:
    results = {
        "base": rows((2.0, "a"), (4.0, "b")),
        "draft": rows((4.0, "a"), (8.0, "B")),
        "ngram": rows((1.5, "a"), (1.5, "b")),
    }
    summary = {s["variant"]: s for s in summarise(results)}
    assert summary["base"]["speed_vs_base"] == 1.0
    assert summary["draft"]["speed_vs_base"] == 0.5 and summary["draft"]["same_text_as_base"] == 1
    assert summary["ngram"]["speed_vs_base"] == 2.0 and summary["ngram"]["same_text_as_base"] == 2
    text = markdown(
        {"model": "m", "draft": "d", "binary": "b", "threads": 2, "cpu_count": 2, "command": "c",
         "summary": list(summary.values())}
    )  # fmt: skip
    assert "| draft | 12.0 | 0.5 | 2.5, 1.2 | 1/2 |" in text


def test_the_variants_are_llama_server_options() -> None:
    assert variant_args("base", Path("d.gguf"), 8, 2) == []
    draft = variant_args("draft", Path("d.gguf"), 6, 2)
    assert draft[:2] == ["--spec-type", "draft-simple"] and "d.gguf" in draft and "6" in draft
    assert variant_args("ngram", Path("d.gguf"), 8, 2) == ["--spec-type", "ngram-simple"]
    with pytest.raises(ValueError, match="unknown variant 'eagle'"):
        variant_args("eagle", Path("d.gguf"), 8, 2)


@pytest.mark.parametrize("variants", ["draft,ngram", "base,eagle"])
def test_a_list_without_base_or_with_an_unknown_variant_is_refused(variants: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--variants", variants, "--out", str(tmp_path / "out")])
    assert exc.value.code == 2 and not (tmp_path / "out").exists()
