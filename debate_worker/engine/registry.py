"""Protocol name → implementation. New protocols register here and in ``DebateConfig.protocol``."""

from __future__ import annotations

from debate_worker.engine.baselines import run_cot, run_rag, run_self_consistency, run_single
from debate_worker.engine.config import KNOWLEDGE_FREE
from debate_worker.engine.madke import run_madke
from debate_worker.engine.outcome import ProtocolRunner
from debate_worker.engine.protocols.kks_debate import run_kks
from debate_worker.engine.protocols.mad import run_mad
from debate_worker.engine.protocols.mallm import run_mallm
from debate_worker.engine.protocols.society import run_society

__all__ = ["KNOWLEDGE_FREE", "PROTOCOLS"]

PROTOCOLS: dict[str, ProtocolRunner] = {
    "madke": run_madke,
    "single": run_single,
    "cot": run_cot,
    "self_consistency": run_self_consistency,
    "rag": run_rag,
    "society": run_society,
    "mad": run_mad,
    "mallm": run_mallm,
    "kks": run_kks,
}
