"""Experiment files: a study declared in TOML or YAML, expanded into cells and checked whole before
anything runs; every error names the file and the line of the setting it is about."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluation.experiment import load_experiment
from evaluation.experiment_text import ExperimentError, toml_key_lines
from tests.evaluation.conftest import QUESTIONS, write_jsonl

GRID = """\
[study]
name = "grid"
out = "out"
baseline = "single"

[[datasets]]
name = "nq"
path = "nq.jsonl"

[config]
temperature = 0.7

[grid]
agents = [2, 3]
rounds = [1, 2, 3]

[[runs]]
protocols = ["single", "society"]
limit = 4
"""


def write(tmp_path: Path, text: str, name: str = "study.toml") -> Path:
    write_jsonl(tmp_path / "nq.jsonl", QUESTIONS)
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_grid_expands_into_one_folder_per_point(tmp_path: Path) -> None:
    experiment = load_experiment(write(tmp_path, GRID))
    assert [c.label for c in experiment.cells] == [
        f"agents={a},rounds={r}" for a in (2, 3) for r in (1, 2, 3)
    ]
    cell = experiment.cells[4]
    assert cell.folder == tmp_path / "out" / "agents=3_rounds=2"
    (request,) = cell.requests
    assert request.base_config == {"temperature": 0.7, "agents": 3, "rounds": 2}
    assert request.limit == 4 and request.dataset == tmp_path / "nq.jsonl"
    assert experiment.run_ids()[:2] == ["agents=2,rounds=1/single", "agents=2,rounds=1/society"]
    assert len(experiment.sha256) == 64


def test_yaml_says_the_same_as_toml(tmp_path: Path) -> None:
    yaml_text = """\
study:
  name: grid
  out: out
  baseline: single
datasets:
  - {name: nq, path: nq.jsonl}
config: {temperature: 0.7}
grid:
  agents: [2, 3]
  rounds: [1, 2, 3]
runs:
  - protocols: [single, society]
    limit: 4
"""
    from_toml = load_experiment(write(tmp_path, GRID))
    from_yaml = load_experiment(write(tmp_path, yaml_text, "study.yaml"))
    assert [(c.label, c.requests) for c in from_yaml.cells] == [
        (c.label, c.requests) for c in from_toml.cells
    ]


def test_seeds_and_models_multiply_the_cells(tmp_path: Path) -> None:
    # top-level keys come before the first table in TOML
    text = "seeds = [7, 8]\n\n" + GRID.replace("[grid]\nagents = [2, 3]\nrounds = [1, 2, 3]\n", "")
    text += '\n[[models]]\nname = "small"\nembedded = "qwen2.5-coder-0.5b"\n'
    text += '\n[[models]]\nname = "remote"\nbase_url = "http://10.0.0.5:8000/v1"\nmodel = "qwen2.5-72b"\n'
    experiment = load_experiment(write(tmp_path, text))
    assert [c.label for c in experiment.cells] == [
        "small,seed=7",
        "small,seed=8",
        "remote,seed=7",
        "remote,seed=8",
    ]
    small, remote = experiment.cells[0].requests[0], experiment.cells[2].requests[0]
    assert small.base_config["seed"] == 7
    assert small.llm_overrides == {"base_url": None, "embedded_model": "qwen2.5-coder-0.5b"}
    assert remote.llm_overrides == {"base_url": "http://10.0.0.5:8000/v1", "model": "qwen2.5-72b"}


@pytest.mark.parametrize(
    ("change", "line", "words"),
    [
        # a key the schema does not know, inside the second [[runs]] table
        (("limit = 4\n", 'limit = 4\n\n[[runs]]\nprotocols = ["single"]\nlimt = 2\n'), 23, "limt"),
        # a grid value the debate configuration refuses: the grid's line
        (("rounds = [1, 2, 3]", "rounds = [1, 2, 99]"), 15, "rounds"),
        # a protocol that does not exist
        (('protocols = ["single", "society"]', 'protocols = ["single", "socety"]'), 18, "socety"),
        # a dataset that is not there
        (('path = "nq.jsonl"', 'path = "missing.jsonl"'), 8, "missing.jsonl"),
        # a baseline no run has
        (('baseline = "single"', 'baseline = "rag"'), 4, "baseline 'rag' is no run"),
        # a step of no questions
        (('baseline = "single"', 'baseline = "single"\ninterleave = 0'), 5, "interleave"),
        # a suite report that does not exist
        (('baseline = "single"', 'baseline = "single"\nsuite_report = "evidense"'), 5, "unknown suite"),
        # an endpoint without its model name
        (
            ("[config]", '[[models]]\nname = "x"\nbase_url = "http://h/v1"\n\n[config]'),
            10,
            "needs the model name",
        ),
        # a TOML syntax error: the parser's own position
        (("[grid]", "[grid"), 13, "not valid TOML"),
    ],
)
def test_a_wrong_file_is_refused_with_its_line(
    tmp_path: Path, change: tuple[str, str], line: int, words: str
) -> None:
    text = GRID.replace(*change)
    assert text != GRID
    with pytest.raises(ExperimentError) as caught:
        load_experiment(write(tmp_path, text))
    message = str(caught.value)
    assert words in message
    assert f"line {line}" in message, message


def test_a_grid_too_large_is_refused(tmp_path: Path) -> None:
    text = GRID.replace("rounds = [1, 2, 3]", f"seed = {list(range(101))}")
    with pytest.raises(ExperimentError, match=r"202 cells .* at most 200"):
        load_experiment(write(tmp_path, text))


def test_a_later_run_cannot_cover_more_questions(tmp_path: Path) -> None:
    text = GRID + '\n[[runs]]\nprotocols = ["cot"]\nlimit = 10\n'
    with pytest.raises(ExperimentError, match=r"line 23: .*cannot cover more questions than the first \(4\)"):
        load_experiment(write(tmp_path, text))


def test_yaml_errors_name_the_line(tmp_path: Path) -> None:
    text = (
        "study:\n  name: x\n  out: o\ndatasets:\n  - {name: nq, path: nq.jsonl}\n"
        "runs:\n  - protocols: [single]\n    limitt: 3\n"
    )
    with pytest.raises(ExperimentError, match=r"study.yaml, line 8: runs.0.limitt"):
        load_experiment(write(tmp_path, text, "study.yaml"))


def test_toml_key_lines_follow_tables_and_arrays() -> None:
    lines = toml_key_lines(GRID + '\n[[runs]]\nprotocols = ["cot"]\n"quoted.key" = 1\n')
    assert lines[("study", "name")] == 2
    assert lines[("grid", "rounds")] == 15
    assert lines[("runs", 0, "limit")] == 19
    assert lines[("runs", 1, "protocols")] == 22
    assert lines[("runs", 1, "quoted.key")] == 23


def test_the_repository_studies_are_valid() -> None:
    root = Path(__file__).resolve().parents[2] / "experiments"
    files = sorted(root.glob("*.toml"))
    assert files
    for path in files:
        experiment = load_experiment(path)
        assert experiment.cells


def test_an_embedded_model_not_installed_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import services.llm

    monkeypatch.setattr(services.llm, "is_installed", lambda model: False)
    text = GRID + '\n[[models]]\nname = "small"\nembedded = "qwen2.5-coder-0.5b"\n'
    with pytest.raises(
        ExperimentError, match=r"line 23: .*not installed: .*parley models install qwen2.5-coder-0.5b"
    ):
        load_experiment(write(tmp_path, text))
