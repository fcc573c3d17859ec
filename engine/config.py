"""``DebateConfig``: the protocol and its parameters, validated once at the edge (API, CLI, batch)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from engine.prompts import get_prompts
from engine.prompts.untrusted import quote
from engine.registry import PROTOCOLS, settings_models
from engine.styles import PromptStyle
from services.chat_model import ENDPOINT_NAME

MAX_AGENTS = 8
MAX_ROUNDS = 10
MAX_QUESTION_CHARS = 2000

KnowledgeMode = Literal["all", "wikipedia", "web", "none"]
JudgeMode = Literal["llm", "rule", "both", "auto"]
# What the pool's Wikipedia searches look for: the question alone, or the question followed by a short
# passage the debate's model writes first (query2doc / HyDE; engine/search_passage.py).
SearchQueryMode = Literal["question", "passage"]
SEARCH_QUERY_MODES: tuple[SearchQueryMode, ...] = get_args(SearchQueryMode)

# Protocols that use a single agent; the others need at least two (derived from the registry).
SINGLE_AGENT_PROTOCOLS = frozenset(name for name, spec in PROTOCOLS.items() if spec.single_agent)
# Protocols that never look at the knowledge pool, so no pool need be built for them.
KNOWLEDGE_FREE = frozenset(name for name, spec in PROTOCOLS.items() if not spec.uses_pool)

# The registry's names, in its order: pydantic validates them and lists them as the OpenAPI enum.
# mypy cannot read a Literal built at run time, so it sees a plain string.
if TYPE_CHECKING:
    ProtocolName = str
else:
    ProtocolName = Literal[tuple(PROTOCOLS)]
# The order in which an agent is shown the other agents' answers (Zhang et al.).
Ordering = Literal["fixed", "random", "madc", "truth_last"]
SpeakingOrder = Literal["fixed", "random", "reverse"]
SettingsT = TypeVar("SettingsT", bound=BaseModel)


def _add_protocol_settings(namespace: dict[str, Any]) -> None:
    """Give ``DebateConfig`` one field per protocol settings model the registry lists, named after its
    protocol and defaulting to the model's defaults, at the place in the class body this is called.

    The protocols declare their settings where they are registered (``ProtocolSpec.settings_model``),
    so a protocol with settings edits nothing here; the fields are declared in the class body (not
    added to a subclass) so the schema lists them where callers have always seen them.
    """
    annotations = namespace.setdefault("__annotations__", {})
    for name, model in settings_models().items():
        annotations[name] = model
        namespace[name] = Field(default_factory=model)


class AgentSpec(BaseModel):
    """One member of a heterogeneous team (Wu et al.): its own endpoint, model, temperature, persona.

    ``endpoint`` names an endpoint the operator configured (``PARLEY_LLM_ENDPOINTS``); its key goes
    only to its own URL. ``base_url`` is for the operator (CLI, in-process evaluation): the API refuses
    it unless the operator allows client URLs, and no operator key is ever sent to a URL that was not
    configured with it. There is deliberately no key field: configs travel through the API, the job
    store and results.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str | None = Field(
        default=None, pattern=ENDPOINT_NAME, description="name of an operator-configured LLM endpoint"
    )
    model: str | None = Field(default=None, max_length=200, description="model name; None = the role's")
    base_url: str | None = Field(
        default=None, max_length=500, description="OpenAI-compatible URL (operator use; refused over REST)"
    )
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    persona: str | None = Field(default=None, max_length=300, description="optional role description")

    @field_validator("base_url")
    @classmethod
    def _check_url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        return v

    @field_validator("persona")
    @classmethod
    def _plain_persona(cls, v: str | None) -> str | None:
        # A persona is quoted into the agent's system prompt like a knowledge item: one line of
        # plain text, no control characters, and the characters of chat-template tokens ([INST],
        # </s>, <|im_start|>, <start_of_turn>) and of Parley's own answers and verdicts ([Yes],
        # {"answer": ...}) replaced by look-alikes that tokenise and parse as nothing.
        if v is None:
            return None
        return quote(v, limit=300) or None

    @model_validator(mode="after")
    def _one_target(self) -> AgentSpec:
        if self.endpoint is not None and self.base_url is not None:
            raise ValueError("give an agent either endpoint (a configured name) or base_url, not both")
        return self


class DebateSearchSettings(BaseModel):
    """Searches during the debate (``engine.pool_search``): after a round that did not end the debate,
    each debater may write one search, whose new items join the shared pool every agent selects from.

    Bounded per debate: searches per agent, items one search adds, the pool's size in all. Each search
    is one LLM call charged to the debate's budget and one retrieval; a retriever that cannot be
    reached ends the searching, never the debate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    per_agent: int = Field(
        default=0, ge=0, le=5, description="searches each debater may write during the debate; 0 = none"
    )
    items_per_search: int = Field(
        default=3, ge=1, le=10, description="most new items one search adds to the pool"
    )
    max_pool_items: int = Field(
        default=20, ge=1, le=60, description="the shared pool grows to at most this many items"
    )
    before_first_round: bool = Field(
        default=False,
        description="a debater whose first selection finds nothing it can use searches before it "
        "speaks (one of its searches)",
    )

    @property
    def enabled(self) -> bool:
        return self.per_agent > 0


class DebateConfig(BaseModel):
    """Everything that decides how a question is debated. Defaults are the MADKE paper's (§4.4)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: ProtocolName = "madke"
    agents: int = Field(default=2, ge=1, le=MAX_AGENTS)
    rounds: int = Field(default=3, ge=1, le=MAX_ROUNDS, description="maximum debate rounds")
    temperature: float = Field(default=0.5, ge=0.0, le=2.0)
    knowledge: KnowledgeMode = "all"
    selection: bool = Field(default=True, description="adaptive knowledge selection (Prompt 3.1)")
    max_selected: int = Field(default=3, ge=1, le=10)
    sequential: bool = Field(default=False, description="one call at a time in speaking order")
    k_wiki: int = Field(default=5, ge=0, le=50)
    k_web: int = Field(default=5, ge=0, le=50)
    search_query: SearchQueryMode = Field(
        default="question",
        description="what the pool's Wikipedia searches look for: question = the question alone; passage "
        "= the question followed by two or three sentences the debate's model writes first (one more "
        "LLM call, role 'search', charged to the debate; none is written when the pool has no Wikipedia "
        "items: knowledge web or none, k_wiki 0)",
    )
    debate_search: DebateSearchSettings = Field(
        default_factory=DebateSearchSettings,
        description="searches the debaters write during the debate when the pool lacks what they need",
    )
    samples: int = Field(default=5, ge=1, le=20, description="self_consistency: reasoning paths sampled")
    prompt_style: PromptStyle = "paper"
    judge: JudgeMode = Field(
        default="auto",
        description="llm: the LLM judge alone (the paper); rule: compare normalised answers; both: stop "
        "only when both agree; auto: both with the robust style, llm with the paper style",
    )
    max_tokens: int | None = Field(
        default=None, ge=16, le=8192, description="per call; None = client default"
    )
    seed: int | None = None
    # Protocols of the literature and the factors they vary.
    ordering: Ordering = Field(
        default="fixed",
        description="order of the other agents' answers shown to an agent (society, mallm, kks); "
        "truth_last needs the gold answer and is for evaluation only",
    )
    team: list[AgentSpec] | None = Field(
        default=None, max_length=MAX_AGENTS, description="per-agent model/endpoint/temperature"
    )
    confidence: bool = Field(default=False, description="agents state confidence 1-10 and see others'")
    speaking_order: SpeakingOrder = Field(default="fixed", description="who speaks first in a turn")
    depth: int = Field(default=1, ge=1, le=3, description="kks: full player-by-player passes")
    reasks: int = Field(default=1, ge=0, le=3, description="re-asks for an unreadable vote/verdict")
    # Each protocol's own settings (``mad``, ``mallm``): see ``_add_protocol_settings``. mypy sees no
    # such field; a protocol reads its own settings with ``protocol_settings``.
    _add_protocol_settings(vars())
    # Budgets: the engine stops a debate that reaches either cap and answers from what it has.
    budget_calls: int | None = Field(
        default=None, ge=1, le=10_000, description="most LLM calls this debate may make; None = no cap"
    )
    budget_tokens: int | None = Field(
        default=None,
        ge=1,
        le=50_000_000,
        description="most prompt + completion tokens this debate may use; None = no cap",
    )

    @field_validator("team")
    @classmethod
    def _no_empty_team(cls, v: list[AgentSpec] | None) -> list[AgentSpec] | None:
        # An empty team describes no agent: the same as no team (every agent the debate's defaults).
        return v or None

    @model_validator(mode="after")
    def _check_agents(self) -> DebateConfig:
        spec = PROTOCOLS[self.protocol]
        if self.agents < spec.min_agents:
            raise ValueError(f"protocol {self.protocol!r} needs at least {spec.min_agents} agents")
        if not spec.single_agent and spec.max_agents is not None and self.agents > spec.max_agents:
            raise ValueError(
                f"agents: protocol {self.protocol!r} has exactly {spec.max_agents} debaters "
                f"({', '.join(spec.answer_roles)})"
                if spec.max_agents == spec.min_agents
                else f"agents: protocol {self.protocol!r} takes at most {spec.max_agents} agents"
            )
        if spec.check is not None:
            spec.load_check()(self)  # the protocol's own rules, kept in its folder
        if self.team is not None and len(self.team) != self.agents:
            raise ValueError(f"team: {len(self.team)} agent specs for {self.agents} agents")
        return self

    @model_validator(mode="after")
    def _honoured_settings(self) -> DebateConfig:
        """Refuse a setting the protocol would ignore: no value is ever silently dropped.

        A field counts as set when it differs from its default, so a config that went through
        ``model_dump``/``model_validate`` (job store, results) validates the same way again.
        """
        ignored = ignored_settings(self)
        if ignored:
            users = {f: sorted(p for p, fs in HONOURED.items() if f in fs) for f in ignored}
            detail = "; ".join(f"{f} (used by {', '.join(users[f]) or 'no protocol'})" for f in ignored)
            raise ValueError(f"{ignored[0]}: protocol {self.protocol!r} does not use {detail}")
        return self

    def protocol_settings(self, model: type[SettingsT]) -> SettingsT:
        """The value of the settings field whose model is ``model`` (the protocol's own settings),
        typed as that model: the field is added from the registry, so mypy cannot see it by name."""
        for name, declared in settings_models().items():
            if declared is model:
                value = getattr(self, name)
                assert isinstance(value, model)
                return value
        raise KeyError(f"no protocol declares the settings model {model.__name__}")

    @property
    def searches_wikipedia(self) -> bool:
        """Whether the debate's pool is built with Wikipedia items (what a search passage changes)."""
        return self.needs_pool and "wikipedia" in self.knowledge_sources() and self.k_wiki > 0

    @property
    def writes_search_passage(self) -> bool:
        """Whether the model writes a search passage before the pool is built (``search_query``). Not
        without Wikipedia items in the pool (``knowledge`` web or none, ``k_wiki`` 0): there is nothing
        for it to search, as ``k_wiki`` means nothing with ``knowledge="web"``."""
        return self.search_query == "passage" and self.searches_wikipedia

    @property
    def requires_gold(self) -> bool:
        """True when the run needs the reference answer (evaluation only; the API must refuse it)."""
        return self.ordering == "truth_last"

    def agent_temperature(self, agent: int) -> float:
        """The agent's own temperature in a heterogeneous team, else the debate's."""
        if self.team is not None and 0 <= agent < len(self.team):
            t = self.team[agent].temperature
            if t is not None:
                return t
        return self.temperature

    @property
    def judge_mode(self) -> str:
        """``judge`` with ``auto`` resolved by prompt style (what measured better, reports/styles-*)."""
        if self.judge == "auto":
            return get_prompts(self.prompt_style).AUTO_JUDGE
        return self.judge

    @property
    def uses_knowledge(self) -> bool:
        return self.knowledge != "none" and (self.k_wiki + self.k_web) > 0

    @property
    def needs_pool(self) -> bool:
        """Whether a knowledge pool must be built (or may be brought) for this debate."""
        return PROTOCOLS[self.protocol].uses_pool and self.uses_knowledge

    def knowledge_sources(self) -> set[str]:
        return {"all": {"wikipedia", "web"}, "wikipedia": {"wikipedia"}, "web": {"web"}, "none": set()}[
            self.knowledge
        ]


# Which settings each protocol honours (its registry spec's ``settings``). A setting outside its
# protocol's set must keep its default (``DebateConfig._honoured_settings``); the tests check each
# listed one takes effect.
HONOURED: dict[str, frozenset[str]] = {name: spec.settings for name, spec in PROTOCOLS.items()}


def ignored_settings(config: DebateConfig) -> list[str]:
    """Fields set to a non-default value that ``config.protocol`` would not use."""
    honoured = HONOURED[config.protocol]
    out = []
    for name, field in DebateConfig.model_fields.items():
        if name in honoured:
            continue
        default = field.get_default(call_default_factory=True)
        value = getattr(config, name)
        if name == "agents" and config.protocol in SINGLE_AGENT_PROTOCOLS and value == 1:
            continue  # one agent is what a single-agent protocol runs anyway
        if name == "knowledge" and value == "none":
            continue  # states exactly what a protocol without knowledge does
        if value != default:
            out.append(name)
    return out


class GoldRequired(ValueError):
    """``ordering=truth_last`` without a reference answer: an evaluation-only setting was misused."""


def require_gold(config: DebateConfig, gold: Sequence[str] | None) -> None:
    """Refuse ``truth_last`` up front when no reference answer was given (not mid-debate)."""
    if config.requires_gold and not gold:
        raise GoldRequired("ordering: 'truth_last' needs the gold answer (evaluation only)")


class Question(str):
    """A question that passed ``validate_question``: stripped, not empty, within ``MAX_QUESTION_CHARS``.

    Validation happens once, where a question enters (the CLI, the MCP tools, the API's request
    models); the engine's entry points (``run_debate``, ``write_search_passage``) take a ``Question``
    as it is and validate only a plain ``str``, from a caller with no boundary of its own (an
    evaluation dataset, the worker reading the job store, a test)."""

    __slots__ = ()


def validate_question(question: str) -> Question:
    """Strip and bound a question at the boundary where it enters; raises ``ValueError`` with a
    message fit for users."""
    q = question.strip()
    if not q:
        raise ValueError("question is empty")
    if len(q) > MAX_QUESTION_CHARS:
        raise ValueError(f"question is {len(q)} characters; the limit is {MAX_QUESTION_CHARS}")
    return Question(q)


def as_question(question: str) -> Question:
    """The engine's entry: a ``Question`` validated at the boundary passes unchanged (it is not
    validated again); a plain ``str`` is validated here (``validate_question``)."""
    return question if isinstance(question, Question) else validate_question(question)
