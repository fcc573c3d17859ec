"""The evaluation tests' fixtures: replays run on folders the real harness wrote."""

from tests.evaluation.conftest import nq_dataset, scripted

__all__ = ["nq_dataset", "scripted"]
