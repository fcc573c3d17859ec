"""One preset per paper's main setup: ``parley eval --preset NAME --dataset FILE``.

A preset is a named ``DebateConfig`` (protocol, agents, rounds, prompt style, knowledge) plus the
accuracy metric the paper reports, with the place in the paper every value comes from. Where Parley
cannot match the paper (API models it does not have, a team of 10 where Parley allows 8) the preset
says so in ``deviations`` and the report repeats it, so nobody mistakes a preset run for a replica.
``--config``/``--set`` still override any value; the overridden fields are listed in the manifest's
run config like any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine import config as engine_config
from engine.config import MAX_AGENTS, DebateConfig
from engine.protocols.mallm import CONSENSUS_DECISIONS, MallmDecision


class UnknownPreset(ValueError):
    """A preset name that is not defined; the message lists the known ones."""


@dataclass(frozen=True)
class Preset:
    name: str
    paper: str
    source: str  # where the settings and the published figures come from (paper sections, tables)
    summary: str
    config: dict[str, Any]
    primary: str = "em"
    metric: str = ""
    benchmarks: tuple[str, ...] = ()
    baselines: tuple[str, ...] = ()
    deviations: tuple[str, ...] = ()

    @property
    def protocol(self) -> str:
        return str(self.config["protocol"])

    def debate_config(self, overrides: dict[str, Any] | None = None) -> DebateConfig:
        """The preset's configuration with ``--config``/``--set`` values on top (validated)."""
        merged = {**self.config}
        for key, value in (overrides or {}).items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        return DebateConfig.model_validate(merged)


MADKE = Preset(
    name="madke",
    paper="MADKE, Multi-Agent Debate with Knowledge-Enhanced framework (FutureForMe/MADKE, Apollo's Oracle)",
    source="MADKE §4.4 (2 agents, ≤3 rounds, temperature 0.5, 5 Wikipedia + 5 Google items), "
    "Algorithm 1 and prompts 3.1-3.5; figures: Table 2 (F1, GPT-4 score, FEVER EM), Table 4 (MMLU-Med EM)",
    summary="2 debaters, up to 3 rounds, adaptive selection of ≤3 items from 5 wiki + 5 web, "
    "LLM judge [Yes]/[No], summarizer",
    config={
        "protocol": "madke",
        "agents": 2,
        "rounds": 3,
        "temperature": 0.5,
        "knowledge": "all",
        "k_wiki": 5,
        "k_web": 5,
        "selection": True,
        "max_selected": 3,
        "prompt_style": "paper",
        "judge": "llm",
    },
    primary="em",
    metric="EM and F1 (paper: F1 and GPT-4 score on QA, EM on FEVER and MMLU-Med)",
    benchmarks=("triviaqa", "nq", "hotpotqa", "2wikimqa", "fever", "mmlu-med"),
    baselines=("single", "cot", "self_consistency", "rag", "society"),
    deviations=(
        "the paper's backbones are GPT-3.5-Turbo and Qwen1.5-32B/72B-Chat; the GPT-4 score needs --judge "
        "with a strong judge model",
        "MADKE's published files carry the paper's own pools; other files use Parley's retriever (its "
        "Wikipedia index, not the paper's DPR index of the 2021 dump), whose web half comes from the "
        "configured search provider: with none (PARLEY_RETRIEVER_WEB_PROVIDER=none, the default) a pool "
        "holds the 5 Wikipedia items only, not the paper's 5 + 5 Google results",
        "MADKE's reference code has a one-shot example per dataset (FEVER labels, MMLU-Med options); "
        "Parley's paper style uses one open-domain example, and FEVER/MMLU-Med questions name their "
        "labels or options",
    ),
)

# Parley's own setting, not a paper's: MADKE whose debaters search again during the debate when the pool
# lacks what they need (engine/pool_search.py). Later work on debate (Tool-MAD, 2026) retrieves at every
# round with agent-specific queries; none of the compared frameworks lets agents grow a shared pool.
MADKE_SEARCH = Preset(
    name="madke-search",
    paper="MADKE with searches during the debate (Parley)",
    source="MADKE §4.4's setting (the madke preset) plus debate_search: after each round that did not "
    "end the debate, each debater may write one search whose new items join the shared pool",
    summary="MADKE (2 debaters, up to 3 rounds, selection of ≤3 items) whose debaters each search once "
    "during the debate, adding up to 3 new items to the shared pool",
    config={
        **MADKE.config,
        "debate_search": {"per_agent": 1, "items_per_search": 3, "max_pool_items": 20},
    },
    primary="strict_contains",
    metric="strict contains; answer-in-pool of the first and the final pool",
    benchmarks=("nq",),
    baselines=("madke", "rag", "single"),
    deviations=("not a paper's setting: no published figure to compare with",),
)

MAD_CIAR = Preset(
    name="mad-ciar",
    paper="Liang et al., MAD (divergent thinking through multi-agent debate)",
    source="MAD §2 and Appendix D (affirmative/negative debaters, tit-for-tat level 2 = default, "
    "adaptive break, at most 3 iterations, extractive judge); figures: Table 3 (CIAR accuracy)",
    summary="affirmative vs negative debater, moderator with adaptive break, extractive judge at the limit",
    config={
        "protocol": "mad",
        "agents": 2,
        "rounds": 3,
        "knowledge": "none",
        "prompt_style": "paper",
        "mad": {"tit_for_tat": 2, "adaptive_break": True},
    },
    primary="em",
    metric="accuracy by numeric equivalence (3/2 = 1.5 = 1.5 m/s)",
    benchmarks=("ciar",),
    baselines=("single", "cot", "self_consistency"),
    deviations=(
        "the paper's backbone is GPT-3.5-Turbo (GPT-4 as reference); its temperature is not stated, "
        "Parley's default is used",
    ),
)

KKS_WU = Preset(
    name="kks-wu",
    paper="Wu et al., Can LLM agents really debate? (Knight-Knave-Spy)",
    source="Wu et al. §5.2 default anchor A (team size 3, confidence hidden, fixed order, depth 1, "
    "all difficulty levels); figures: Table 3 (instance accuracy after debate, sizes 4/6/8)",
    summary="3 agents: proposal, one player-by-player debate pass with self-adjustment, final decision, "
    "per-player majority",
    config={
        "protocol": "kks",
        "agents": 3,
        "depth": 1,
        "confidence": False,
        "speaking_order": "fixed",
        "ordering": "fixed",
        "prompt_style": "paper",
    },
    primary="em",
    metric="KKS Strict (every role right) and Smooth (share of roles right)",
    benchmarks=("kks-4", "kks-6", "kks-8"),
    baselines=("single", "cot"),
    deviations=(
        "the anchor team Het-Mix A is three API models (gpt-5-nano, qwen-turbo-latest, "
        "gemini-2.5-flash-lite); Parley's preset gives all three agents the configured model "
        "(set `team` for a heterogeneous one)",
    ),
)

MADC = Preset(
    name="madc",
    paper="Zhang et al., Key decision-makers in multi-agent debate (MADC)",
    source="Zhang et al. Table 1 (Du et al.'s debate, 1 debate round, MADC ordering: the most "
    "consistent view speaks last); figures: Table 1 (Logic, Geometry, MATH500 accuracy)",
    summary="society debate (independent answers, then one debate round), views ordered by path "
    "consistency, majority vote",
    config={
        "protocol": "society",
        "agents": MAX_AGENTS,
        "rounds": 2,
        "ordering": "madc",
        "knowledge": "none",
        "prompt_style": "paper",
    },
    primary="em",
    metric="accuracy (multiple choice by option, MATH500 by numeric equivalence)",
    benchmarks=("logical-deduction", "geometric-shapes", "math500"),
    baselines=("cot", "self_consistency"),
    deviations=(
        f"the paper's Table 1 uses 10 agents; Parley allows at most {MAX_AGENTS}",
        "Parley's rounds count the independent first answers, so rounds=2 is one debate round",
    ),
)

# Kaesberg et al. (MALLM): the decision protocol is the one variable; everything else is their default.
MALLM_DECISIONS: tuple[MallmDecision, ...] = (
    "majority",
    "supermajority",
    "unanimity",
    "simple",
    "ranked",
    "cumulative",
    "approval",
)


def mallm_preset(decision: MallmDecision) -> Preset:
    kind = "consensus" if decision in CONSENSUS_DECISIONS else "voting"
    return Preset(
        name=f"mallm-{decision}",
        paper="Kaesberg et al., Voting or consensus? Decision-making in multi-agent debate (MALLM)",
        source="Kaesberg et al. §3 and Appendix F (3 agents with personas, memory paradigm, 2 turns of "
        "memory, voting after 3 turns, at most 5 turns); figures: Table 4 (MMLU, MMLU-Pro, GPQA, "
        "StrategyQA, Llama 3 8B)",
        summary=f"{decision} {kind}, 3 agents, memory paradigm, up to 5 turns",
        config={
            "protocol": "mallm",
            "agents": 3,
            "rounds": 5,
            "knowledge": "none",
            "prompt_style": "paper",
            "mallm": {"decision": decision, "paradigm": "memory", "vote_after": 3, "memory_turns": 2},
        },
        primary="em",
        metric="accuracy (multiple choice by option letter)",
        benchmarks=("mmlu", "mmlu-pro", "gpqa", "strategyqa"),
        baselines=("cot",),
        deviations=(
            "the paper's agents are Llama 3 8B (and 70B, in figures only)",
            "the paper generates three expert personas per question with the same model; Parley's agents "
            "have none unless `team` gives them personas",
        )
        + (
            ("approval voting has no figure in the paper's text (Figure 2 only)",)
            if decision == "approval"
            else ()
        ),
    )


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (MADKE, MADKE_SEARCH, MAD_CIAR, KKS_WU, *(mallm_preset(d) for d in MALLM_DECISIONS), MADC)
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise UnknownPreset(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}") from None


def honoured_fields(protocol: str) -> frozenset[str] | None:
    """The settings a protocol uses, when the engine declares them (``HONOURED``); None otherwise."""
    table = getattr(engine_config, "HONOURED", None)
    if isinstance(table, dict) and protocol in table:
        return frozenset(table[protocol])
    return None


KNOWLEDGE_FIELDS = frozenset(
    {"knowledge", "selection", "max_selected", "k_wiki", "k_web", "search_query", "debate_search"}
)
KNOWLEDGE_BASELINES = frozenset({"rag", "madke"})


def shared_settings(config: dict[str, Any], protocol: str) -> dict[str, Any]:
    """The part of a preset's configuration another protocol (a baseline run next to the preset's)
    can take: the same temperature, prompt style, knowledge and agents, minus what it does not use."""
    honoured = honoured_fields(protocol)
    # The searches during the debate are what a preset like madke-search compares against its
    # baselines: a baseline (madke itself included) never inherits them.
    out = {k: v for k, v in config.items() if k not in ("protocol", "debate_search")}
    if protocol not in KNOWLEDGE_BASELINES:
        # The papers' baselines other than RAG answer without knowledge (MADKE Table 2's "MAD" is Du
        # et al.'s debate), so a baseline next to a knowledge preset does not inherit its pool.
        out = {k: v for k, v in out.items() if k not in KNOWLEDGE_FIELDS}
        if "knowledge" in (honoured if honoured is not None else {"knowledge"}):
            out["knowledge"] = "none"
    if honoured is not None:
        out = {k: v for k, v in out.items() if k in honoured}
    elif protocol in engine_config.SINGLE_AGENT_PROTOCOLS:
        out.pop("agents", None)
    return out
