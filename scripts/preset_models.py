"""Write the gateway's copy of the evaluation presets (``api/preset_models.json``).

The gateway offers every paper preset as an OpenAI model (``parley-mad-ciar``, …) but may not import
the evaluation harness, so it reads the presets' names, summaries and configurations as data. This
script writes that data from ``evaluation/presets.py``; ``tests/api/test_preset_models.py`` fails when
the two differ. Run ``.venv/bin/python scripts/preset_models.py`` after changing a preset.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "api" / "preset_models.json"


def render() -> str:
    sys.path.insert(0, str(ROOT))
    from evaluation.presets import PRESETS

    rows = [{"name": p.name, "summary": p.summary, "config": p.config} for p in PRESETS.values()]
    return json.dumps(rows, indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    TARGET.write_text(render(), encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
