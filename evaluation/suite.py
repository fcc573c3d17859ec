"""Named suites: one command that runs the protocols that matter on enough questions to tell them apart.

``parley eval --suite evidence --dataset data/nq_open_vital_dev.jsonl --out reports/evidence`` runs,
in one output folder and on the same knowledge pools,

- **tier 1** on the first 300 questions: RAG (the reference), closed-book single, MADKE and the
  same-budget self-consistency vote given each question's MADKE tokens (Choi et al.'s control);
- **tier 2** on the first 100 of them: CoT, self-consistency, MAD, society and MALLM (majority consensus).

Both tiers are ordinary ``parley eval`` runs, so an interrupted suite resumes where it stopped (run the
same command: finished items are skipped, failed ones retried; the pools are reused). Afterwards
``suite.md``/``suite.json`` give each run's accuracy with a 95 % CI, the paired differences against
RAG and against the same-budget vote with 95 % CIs, tokens and seconds per question, which setting
each run used, and ``plots/cost_accuracy.png`` (accuracy against tokens per question, one point per
protocol, CI error bars).

The figures of the papers are for much larger models than the embedded default: the suite's report
repeats where they found the effect (MADKE §5.3: knowledge helps from 32B parameters; no gain at
1.8–14B), so a small model's null result is read as what it is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from evaluation.harness import EvalOutcome, EvalRequest, PlanError
from evaluation.presets import MADKE
from evaluation.store import Workspace
from evaluation.suite_report import write_suite_report


@dataclass(frozen=True)
class Suite:
    """Two tiers of runs over the first questions of one dataset, and the reference runs of the
    comparisons."""

    name: str
    summary: str
    main: tuple[str, ...]  # tier 1; the first is the reference of the comparisons
    extra: tuple[str, ...]  # tier 2, on the first ``extra_limit`` questions
    main_limit: int
    extra_limit: int
    debate: str  # the debate whose tokens the same-budget vote is given
    extra_config: dict[str, Any] = field(default_factory=dict)

    @property
    def reference(self) -> str:
        return self.main[0]


EVIDENCE = Suite(
    name="evidence",
    summary="RAG, single, MADKE and the same-budget vote on 300 questions; CoT, self-consistency, MAD, "
    "society and MALLM (majority) on 100",
    main=("rag", "single", "madke"),
    extra=("cot", "self_consistency", "mad", "society", "mallm"),
    main_limit=300,
    extra_limit=100,
    debate="madke",
    extra_config={"mallm": {"decision": "majority"}},
)

SUITES: dict[str, Suite] = {EVIDENCE.name: EVIDENCE}


def get_suite(name: str) -> Suite:
    try:
        return SUITES[name]
    except KeyError:
        raise PlanError(f"unknown suite {name!r}; suites: {', '.join(SUITES)}") from None


def suite_requests(
    suite: Suite,
    base: EvalRequest,
    *,
    main_limit: int | None = None,
    extra_limit: int | None = None,
    paper_setting: bool = False,
) -> tuple[EvalRequest, EvalRequest]:
    """The two ``parley eval`` requests of a suite, into one output folder.

    ``paper_setting``: MADKE runs as the paper's preset (its agents, rounds, pool sizes, LLM judge and
    selection prompt, in the paper's wording) and every other run in the paper's wording too;
    otherwise every run uses the model's reliable style (``base.default_style``)."""
    if base.protocols and base.protocols != ["madke"]:
        raise PlanError("--suite chooses the protocols itself; drop --protocols")
    if base.preset is not None or base.prompt_styles:
        raise PlanError(
            "--suite runs one style per protocol; drop --preset / --prompt-styles (see --paper-setting)"
        )
    main_n = main_limit or suite.main_limit
    extra_n = extra_limit or suite.extra_limit
    if extra_n > main_n:
        raise PlanError(f"the second tier ({extra_n} questions) cannot be larger than the first ({main_n})")
    if paper_setting:
        # The preset's run is labelled madke; the other tier-1 protocols run beside it as its baselines,
        # with the paper's wording (the preset's shared settings).
        main = replace(
            base,
            protocols=[p for p in suite.main if p != suite.debate],
            preset=MADKE.name,
            limit=main_n,
            same_budget=True,
        )
        extra_base = {**suite.extra_config, **base.base_config, "prompt_style": "paper"}
    else:
        main = replace(base, protocols=list(suite.main), limit=main_n, same_budget=True)
        extra_base = {**suite.extra_config, **base.base_config}
    # The second tier adds runs to the first one's folder: it must never start it afresh.
    extra = replace(
        base,
        protocols=list(suite.extra),
        limit=extra_n,
        base_config=extra_base,
        same_budget=False,
        fresh=False,
    )
    return main, extra


Evaluate = Callable[..., Awaitable[EvalOutcome]]


async def run_suite(
    suite: Suite,
    main: EvalRequest,
    extra: EvalRequest,
    evaluate: Evaluate,
    *,
    plots: bool = True,
    **deps: Any,
) -> dict[str, Any]:
    """Run (or resume) both tiers with the same dependencies (``models``, ``pool_builder``, ``judge``)
    and write the suite report; returns it."""
    first = await evaluate(main, **deps)
    second = await evaluate(extra, **deps)
    return write_suite_report(
        Workspace(main.out),
        suite,
        labels=[*first.labels, *second.labels],
        samples=main.bootstrap_samples,
        seed=main.bootstrap_seed,
        plots=plots,
    )
