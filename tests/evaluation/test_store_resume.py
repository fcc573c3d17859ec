"""A folder resumes across versions: a setting a run did not record counts as the engine's default."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import DebateConfig
from evaluation.store import Manifest, RunSpec, Workspace, WorkspaceError


def _manifest(config: dict[str, object]) -> Manifest:
    return Manifest(
        dataset="d.jsonl",
        format="nq",
        primary="contains",
        runs=[RunSpec(label="rag", protocol="rag", prompt_style="robust", config=config)],
    )


@pytest.mark.unit
def test_a_setting_recorded_later_at_its_default_resumes(tmp_path: Path) -> None:
    now = DebateConfig(protocol="rag").model_dump()
    before = {k: v for k, v in now.items() if k != "search_query"}  # recorded before the setting existed
    ws = Workspace(tmp_path)
    ws.merge_manifest(_manifest(before))
    ws.merge_manifest(_manifest(now))  # the same run: no error


@pytest.mark.unit
def test_a_setting_that_really_changed_is_refused(tmp_path: Path) -> None:
    now = DebateConfig(protocol="rag").model_dump()
    before = {k: v for k, v in now.items() if k != "search_query"}
    ws = Workspace(tmp_path)
    ws.merge_manifest(_manifest(before))
    with pytest.raises(WorkspaceError, match="search_query"):
        ws.merge_manifest(_manifest({**now, "search_query": "passage"}))
    with pytest.raises(WorkspaceError, match="temperature"):
        ws.merge_manifest(_manifest({**before, "temperature": 0.123}))
