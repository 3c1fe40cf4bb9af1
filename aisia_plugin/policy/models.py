"""Typed, read-only access to a loaded policy.

The fields mirror schemas/aisia-policy.schema.json one to one (tests/test_schema_models.py fails
when they drift apart). No field has a default here: the loader fills defaults from the schema
before these models are built, so the schema stays the only place a default is written."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict

Tier = Literal["ultra", "pro", "standard", "free"]
# What a deployment can take (capabilities.CAPABILITIES, docs/capabilities.md).
Capability = Literal["vision", "audio_input", "pdf_input", "function_calling", "response_schema", "reasoning",
                     "audio_output"]


def _def(name: str):
    def wrap(cls):
        cls.__schema_def__ = name
        return cls

    return wrap


@_def("Selector")
class Selector(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    models: list[str]
    ids: list[str]
    tags: list[str]
    providers: list[str]
    tiers: list[Tier]
    locality: Literal["any", "local", "remote"]
    exclude: list[str]


@_def("Sla")
class Sla(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    target_p95_ms: float
    max_error_rate: float
    max_cost_per_1m: Optional[float]
    hard_constraints: bool


@_def("Budget")
class Budget(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    max_cost_per_request_usd: Optional[float]
    mode: Literal["soft", "strict"]
    expected_output_tokens: int
    target_usd_per_1k_requests: Optional[float]
    pacing_rate: float
    max_multiplier: float
    min_multiplier: float
    floor_tier: Optional[Tier]


@_def("Failover")
class Failover(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    attempts: int


@_def("LocalFirstPenalties")
class LocalFirstPenalties(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    refusal: float
    empty_answer: float
    truncated: float
    invalid_json: float
    hedging: float


@_def("LocalFirst")
class LocalFirst(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool
    min_confidence: float
    streams: Literal["skip", "local"]
    request_logprobs: bool
    logprob_weight: float
    learned_weight: float
    penalties: LocalFirstPenalties
    evidence_weight: float


@_def("ColdStart")
class ColdStart(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    count: float
    from_task_fitness: bool
    price_slope: float


@_def("Contextual")
class Contextual(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    prior_model: Optional[str]
    prior_variance: float
    noise_variance: float
    exploration: float
    quality_tolerance: float
    cold_start: ColdStart


@_def("Alias")
class Alias(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    description: str
    candidates: Selector
    strategy: str
    mode_pack: Optional[str]
    exploration: float
    exploration_c: Optional[float]
    cost_weight: Optional[float]
    latency_weight: Optional[float]
    domain_hint: Optional[str]
    task_hint: Optional[str]
    tier_hint: Optional[Tier]
    sla: Sla
    budget: Budget
    failover: Failover
    lkgp_enabled: bool
    contextual: Contextual
    requires: list[Capability]
    local_first: LocalFirst


@_def("PerDomain")
class PerDomain(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool
    prior_strength: float


@_def("Forgetting")
class Forgetting(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool
    half_life_requests: float


@_def("Bandit")
class Bandit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    exploration_c: float
    cost_weight: float
    latency_weight: float
    cost_scale_per_1m: float
    latency_scale_s: float
    latency_ema_weight: float
    latency_length_cap_tokens: int
    latency_prompt_cap_tokens: int
    initial_latency_s: float
    thompson_success_threshold: float
    thompson_bonuses: bool
    per_domain: PerDomain
    forgetting: Forgetting


@_def("Reward")
class Reward(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    quality_weight: float
    latency_weight: float
    feedback_weight: float
    failure_reward: float


@_def("QualityPrior")
class QualityPrior(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    by_tier: dict[Tier, float]
    untiered: float
    speciality_bonus: float
    strength: float


@_def("QualityEvidence")
class QualityEvidence(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    feedback: float
    judge: float
    signal: float


@_def("JudgeLanguage")
class JudgeLanguage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    words: list[str]
    instructions: Optional[str]
    rubrics: dict[str, Optional[str]]


@_def("Judge")
class Judge(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    deployment: Optional[str]
    sample_rate: float
    daily_usd_cap: float
    timeout_s: float
    queue_size: int
    max_chars: int
    max_output_tokens: int
    default_language: str
    languages: dict[str, JudgeLanguage]


@_def("Quality")
class Quality(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    prior: QualityPrior
    evidence: QualityEvidence
    half_life_requests: float
    judge: Judge


@_def("Weights")
class Weights(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    quota: float
    health: float
    cost_inv: float
    latency_inv: float
    task_fit: float
    stability: float
    tier_priority: float
    tier_affinity: float
    specificity_match: float
    context_affinity: float
    cache_affinity: float
    session_availability: float
    reset_window_affinity: float
    connection_density: float
    quality: float
    reliability: float


FACTORS: tuple[str, ...] = tuple(Weights.model_fields)


@_def("Rules")
class Rules(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    weights: Weights


@_def("ModePack")
class ModePack(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    description: str
    weights: dict[str, float]


@_def("Domain")
class Domain(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    description: str
    patterns: list[str]
    weight: float
    min_density: float


@_def("Domains")
class Domains(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool
    min_matches: int
    max_scan_chars: int
    definitions: dict[str, Domain]


@_def("SignalWeights")
class SignalWeights(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    correction: float
    dissatisfaction: float
    satisfaction: float
    regenerate: float
    rephrase: float
    refusal: float
    empty_answer: float
    truncated: float
    invalid_json: float
    tool_error: float
    repeated_answer: float
    no_complaint: float


@_def("SignalLexicon")
class SignalLexicon(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    correction: dict[str, Optional[str]]
    dissatisfaction: dict[str, Optional[str]]
    satisfaction: dict[str, Optional[str]]
    neutral: dict[str, Optional[str]]
    refusal: dict[str, Optional[str]]
    tool_error: dict[str, Optional[str]]
    hedging: dict[str, Optional[str]]


@_def("Signals")
class Signals(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool
    max_scan_chars: int
    short_message_words: int
    lead_chars: int
    rephrase_min_similarity: float
    rephrase_min_words: int
    repeat_min_similarity: float
    repeat_min_words: int
    answer_lead_chars: int
    conversation_ttl_s: float
    conversation_max_turns: int
    max_signals_per_key_hour: int
    weights: SignalWeights
    lexicons: dict[str, SignalLexicon]


@_def("DeploymentAnnotation")
class DeploymentAnnotation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    provider: Optional[str]
    tier: Optional[Tier]
    local: Optional[bool]  # None: inferred from the deployment (deployments.infer_local)
    tags: list[str]
    specialities: dict[str, Optional[str]]
    input_cost_per_1m: Optional[float]
    output_cost_per_1m: Optional[float]
    capabilities: dict[Capability, bool]


@_def("Outlier")
class Outlier(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool
    window_s: float
    min_peer_calls: int
    min_peer_success_rate: float
    max_calls: int


@_def("CircuitBreaker")
class CircuitBreaker(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    failure_threshold: int
    timeout_s: float
    half_open_max_calls: int
    failure_status_codes: list[int]
    count_timeouts: bool
    count_connection_errors: bool
    rate_limit_cooldown_s: float
    max_retry_after_s: float
    outlier: Outlier


class FitnessBoost(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    contains: str
    tasks: list[str]
    boost: float


@_def("TaskFitness")
class TaskFitness(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    default: float
    models: dict[str, dict[str, float]]
    boosts: list[FitnessBoost]


@_def("Costs")
class Costs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    default_per_1m: float
    by_provider_prefix: dict[str, float]


@_def("State")
class State(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    backend: Literal["memory", "redis"]
    redis_url_env: str
    key_prefix: str
    bandit_ttl_s: int
    breaker_ttl_s: int
    cache_ttl_ms: int
    timeout_ms: int
    io_timeout_ms: int
    flush_ms: int
    contextual_fold_ms: int
    batch_max: int
    queue_max: int
    reconnect_max_ms: int
    cluster: bool
    snapshot_path: Optional[str]


@_def("Proxy")
class Proxy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    session_header: str
    verbose_reason_header: bool
    reload_interval_s: float
    explain_history: int
    fail_closed: bool


@_def("DecisionLog")
class DecisionLog(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    path: Optional[str]
    log_prompts: bool
    max_bytes: int
    backups: int
    max_queued: int


@_def("Logging")
class Logging(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    decisions: DecisionLog


@_def("Layer")
class Layer(BaseModel):
    """A team's or a named layer as written: partial sections, each field inheriting the
    operator's value (the loader builds the effective policy of each layer: policy/layers.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    description: str
    aliases: dict[str, dict]
    deployments: dict[str, dict]
    reward: dict


@_def("")
class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    version: int
    overrides: bool
    defaults: bool
    aliases: dict[str, Alias]
    bandit: Bandit
    reward: Reward
    quality: Quality
    rules: Rules
    mode_packs: dict[str, ModePack]
    domains: Domains
    signals: Signals
    deployments: dict[str, DeploymentAnnotation]
    circuit_breaker: CircuitBreaker
    task_fitness: TaskFitness
    costs: Costs
    state: State
    proxy: Proxy
    logging: Logging
    teams: dict[str, Layer]
    layers: dict[str, Layer]


# schema $defs name -> model, for the agreement test and the reference generator.
MODELS_BY_DEF: dict[str, type[BaseModel]] = {
    cls.__schema_def__: cls
    for cls in (Selector, Sla, Budget, Failover, LocalFirstPenalties, LocalFirst, ColdStart, Contextual, Alias,
                PerDomain, Forgetting, Bandit, Reward,
                QualityPrior, QualityEvidence, JudgeLanguage, Judge, Quality, Weights, Rules, ModePack, Domain, Domains,
                SignalWeights, SignalLexicon, Signals, DeploymentAnnotation,
                Outlier, CircuitBreaker, TaskFitness, Costs, State, Proxy, DecisionLog, Logging, Layer, Policy)
}
