"""Seeded synthetic routing scenarios, to try a policy on drift, an outage or a price change with
no data of one's own (`aisia replay --scenario NAME`): N providers with per-domain quality,
lognormal latencies and the AISIA seed's prices.

Every trace line carries the outcome of every candidate (the oracle is exact). A scenario is its
records and its metadata (the providers, the seed and the *event*: which candidate changes, how,
from which request to which); ``write_scenario`` writes them as ``<scenario>.jsonl``,
``<scenario>.meta.json`` and ``<scenario>.candidates.yaml``. The model (domains and prompts, the
Gaussian copula of successes across providers, graded scores, latencies, costs), the scenarios and
their events, and the prompt-aware scenario's hidden difficulty and its signals are described in
benchmarks/README.md ("Synthetic scenarios"). Only ``random`` draws, seeded: the same arguments
give the same bytes."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from .candidates import CandidateSpec, price_specs, write_candidates
from .trace import Trace, parse_record, write_records

DEFAULT_SEED = 7
DEFAULT_REQUESTS = 3000
DEFAULT_PROVIDERS = 11
SCENARIOS = ("stationary", "degrade", "outage", "latency_spike", "price_change")
PROMPT_SCENARIOS = ("prompt_aware",)  # generated apart: quality depends on the prompt beyond its domain
DOMAINS = ("coding", "math", "translation", "general")
DOMAIN_MIX = {"coding": 0.3, "math": 0.25, "translation": 0.2, "general": 0.25}
GRADED = {"translation", "general"}
RHO = 0.7
LATENCY_SIGMA = 0.35
DEGRADE_FACTOR = 0.25
SPIKE_FACTOR = 10.0
PRICE_FACTOR = 10.0
GOOD_QUALITY = 0.75
OUTAGE_STATUS = 503
OUTAGE_LATENCY_MS = 150.0
SYSTEM_OVERHEAD_TOKENS = 12
OUTPUT_TOKENS = {"coding": (260, 0.5), "math": (180, 0.5), "translation": (90, 0.4), "general": (160, 0.6)}

# The AISIA seed's price table, USD per 1M tokens.
SEED_PRICES = {
    "cerebras": 0.2, "groq": 0.3, "deepseek": 0.5, "deepinfra": 0.6, "together": 0.8, "fireworks": 0.9,
    "cohere": 1.0, "perplexity": 1.0, "gemini": 1.25, "ai21": 1.5, "mistral": 2.0, "openrouter": 3.0,
    "openai": 5.0, "anthropic": 8.0,
}


@dataclass(frozen=True)
class Provider:
    name: str  # candidate name, provider prefix before the first '-'
    median_ms: float
    quality: tuple  # base success probability per DOMAINS entry

    @property
    def provider(self) -> str:
        return self.name.split("-", 1)[0]

    @property
    def price_per_1m(self) -> float:
        return SEED_PRICES[self.provider]


# In order of inclusion (the first N are used). quality: coding, math, translation, general.
PROVIDERS = [
    Provider("cerebras-llama-8b", 300, (0.45, 0.40, 0.60, 0.65)),
    Provider("groq-llama-70b", 380, (0.68, 0.62, 0.72, 0.78)),
    Provider("deepseek-v3", 2600, (0.86, 0.84, 0.70, 0.78)),
    Provider("fireworks-llama-405b", 900, (0.93, 0.91, 0.90, 0.93)),
    Provider("together-mixtral-8x22b", 800, (0.66, 0.60, 0.80, 0.74)),
    Provider("openai-gpt-4o", 1500, (0.88, 0.87, 0.88, 0.90)),
    Provider("anthropic-claude-sonnet", 2200, (0.90, 0.85, 0.87, 0.89)),
    Provider("mistral-large", 1300, (0.74, 0.70, 0.90, 0.80)),
    Provider("gemini-1.5-pro", 1700, (0.82, 0.86, 0.84, 0.84)),
    Provider("deepinfra-qwen-72b", 1100, (0.78, 0.80, 0.70, 0.74)),
    Provider("cohere-command-r", 1400, (0.58, 0.50, 0.78, 0.72)),
    Provider("perplexity-sonar", 2000, (0.62, 0.58, 0.66, 0.82)),
    Provider("ai21-jamba", 1600, (0.60, 0.55, 0.72, 0.70)),
    Provider("openrouter-llama-70b", 4000, (0.68, 0.62, 0.72, 0.78)),
    Provider("gemini-1.5-flash", 600, (0.70, 0.74, 0.78, 0.76)),
]

# Short realistic prompts per domain, English and French; {x}/{y} filled from the lists below.
TEMPLATES = {
    "coding": [
        "Write a Python function that {code_task}.",
        "Debug this code: it raises a KeyError when {code_bug}.",
        "Écris une fonction Python qui {code_task_fr}.",
        "Explain what this API call does and write a pytest test for the function that {code_task}.",
        "Peux-tu corriger ce code ? La fonction plante quand {code_bug_fr}.",
        "Refactor this class so that it {code_task}, with type hints.",
    ],
    "math": [
        "Solve the equation {a}x + {b} = {c} and explain each step.",
        "Calculate the derivative of x^{a} + {b}x and evaluate it at x = {c}.",
        "Résous l'équation {a}x - {b} = {c} et calcule la valeur de x.",
        "What is the probability of drawing {a} red balls out of {c} draws if {b}% of the balls are red?",
        "Calcule le déterminant de la matrice [[{a}, {b}], [{c}, {a}]].",
        "A train travels {c} km in {a} hours; calculate its average speed and the time for {b} km.",
    ],
    "translation": [
        "Traduis en anglais : « {fr_sentence} »",
        "Translate to French: \"{en_sentence}\"",
        "Traduction en français, registre formel : \"{en_sentence}\"",
        "Peux-tu traduire ce paragraphe en anglais ? {fr_sentence}",
    ],
    "general": [
        "Give me three ideas for {topic}.",
        "Summarise the main arguments for and against {topic} in a short paragraph.",
        "Donne-moi trois idées pour {topic_fr}.",
        "Write a polite email asking my manager about {topic}.",
        "Quels sont les avantages et les inconvénients de {topic_fr} ?",
    ],
}
FILL = {
    "code_task": ["parses a CSV file and returns the column averages", "removes duplicates from a list while keeping order",
                  "retries an HTTP request with exponential backoff", "validates an email address",
                  "merges two sorted lists", "caches the results of an expensive call"],
    "code_task_fr": ["lit un fichier JSON et renvoie les clés", "trie une liste de dictionnaires par date",
                     "calcule la moyenne mobile d'une série", "vérifie qu'un mot est un palindrome"],
    "code_bug": ["the input dictionary is empty", "two threads update the cache", "the config file is missing a key"],
    "code_bug_fr": ["la liste est vide", "le fichier n'existe pas", "l'utilisateur n'a pas d'adresse"],
    "fr_sentence": ["Le rendez-vous est reporté à jeudi prochain.", "Nous avons bien reçu votre commande et vous en remercions.",
                    "La réunion portera sur le budget du trimestre.", "Merci de confirmer votre présence avant vendredi."],
    "en_sentence": ["Please find attached the signed contract.", "The delivery will arrive within three business days.",
                    "We are sorry for the inconvenience caused.", "The meeting has been moved to the main room."],
    "topic": ["a team-building day", "remote work", "reducing our cloud bill", "a birthday party for a ten-year-old",
              "learning a new language", "a weekend trip to the mountains"],
    "topic_fr": ["une sortie d'équipe", "le télétravail", "réduire nos dépenses", "un week-end à la campagne",
                 "apprendre la guitare"],
}


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _prompt(domain: str, rng: random.Random) -> str:
    tpl = rng.choice(TEMPLATES[domain])
    values = {k: rng.choice(v) for k, v in FILL.items()}
    values.update(a=rng.randint(2, 9), b=rng.randint(1, 40), c=rng.randint(10, 99))
    return tpl.format(**values)


def _requests(ps: list[Provider], n: int, rng: random.Random, prompt_aware: bool = False):
    """Per request: (domain, hard, prompt, input tokens, [(provider, u, output tokens, latency ms)]).
    Each provider's copula uniform u (success iff u < q) shares the request's difficulty z."""
    domains, weights = list(DOMAIN_MIX), list(DOMAIN_MIX.values())
    for _ in range(n):
        domain = rng.choices(domains, weights)[0]
        hard = prompt_aware and rng.random() < HARD_SHARE
        prompt = _prompt(domain, rng)
        if prompt_aware:
            prompt = _hard_prompt(prompt, domain, hard, rng)
        med_out, sig_out = OUTPUT_TOKENS[domain]
        z = rng.gauss(0.0, 1.0)  # the request's difficulty (shared by every provider)
        draws = []
        for p in ps:
            u = _phi(RHO * z + math.sqrt(1.0 - RHO * RHO) * rng.gauss(0.0, 1.0))
            tout = max(1, int(round(med_out * math.exp(sig_out * rng.gauss(0.0, 1.0)))))
            latency = p.median_ms * (0.5 + 0.5 * tout / 250.0) * math.exp(LATENCY_SIGMA * rng.gauss(0.0, 1.0))
            draws.append((p, u, tout, latency))
        yield domain, hard, prompt, math.ceil(len(prompt) / 4) + SYSTEM_OVERHEAD_TOKENS, draws


def _outcome(domain: str, q: float, u: float, tin: int, tout: int, latency: float, price: float) -> dict:
    score = min(1.0, max(0.0, 0.5 + q - u)) if domain in GRADED else (1.0 if u < q else 0.0)
    return {"score": round(score, 4), "cost_usd": round((tin + tout) * price / 1e6, 10), "latency_ms": round(latency, 1),
            "input_tokens": tin, "output_tokens": tout}


def _providers_meta(ps: list[Provider], **extra) -> dict:
    return {p.name: {"provider": p.provider, "price_per_1m": p.price_per_1m, "latency_median_ms": p.median_ms,
                     "quality": dict(zip(DOMAINS, p.quality)), "mean_quality": round(mean_quality(p), 4),
                     **{k: round(v[p.name], 4) for k, v in extra.items()}} for p in ps}


def providers(n: int = DEFAULT_PROVIDERS) -> list[Provider]:
    if not 8 <= n <= len(PROVIDERS):
        raise ValueError(f"providers: 8 to {len(PROVIDERS)}, got {n}")
    return PROVIDERS[:n]


def mean_quality(p: Provider) -> float:
    return sum(DOMAIN_MIX[d] * q for d, q in zip(DOMAINS, p.quality))


def best_provider(ps: list[Provider]) -> Provider:
    return max(ps, key=lambda p: (mean_quality(p), -p.price_per_1m))


def scenario_event(name: str, ps: list[Provider], n: int) -> Optional[dict]:
    """Which candidate changes, how and when (request indices, [start, end))."""
    best = best_provider(ps)
    if name == "stationary":
        return None
    if name == "degrade":
        return {"kind": "quality", "candidate": best.name, "start": n // 2, "end": (3 * n) // 4, "factor": DEGRADE_FACTOR,
                "why": "best provider by mean success probability"}
    if name == "outage":
        return {"kind": "outage", "candidate": best.name, "start": (4 * n) // 10, "end": n // 2,
                "status_code": OUTAGE_STATUS, "latency_ms": OUTAGE_LATENCY_MS, "why": "best provider by mean success probability"}
    if name == "latency_spike":
        p = min(ps, key=lambda p: p.median_ms)
        return {"kind": "latency", "candidate": p.name, "start": n // 2, "end": (3 * n) // 4, "factor": SPIKE_FACTOR,
                "why": "fastest provider (lowest latency median)"}
    if name == "price_change":
        p = min((p for p in ps if mean_quality(p) >= GOOD_QUALITY), key=lambda p: (p.price_per_1m, -mean_quality(p)))
        return {"kind": "price", "candidate": p.name, "start": n // 2, "end": n, "factor": PRICE_FACTOR,
                "new_price_per_1m": p.price_per_1m * PRICE_FACTOR,
                "why": f"cheapest provider with mean quality >= {GOOD_QUALITY}"}
    raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS + PROMPT_SCENARIOS)}")


def price_event(event: Optional[dict]):
    """For a price event, run_router's ``deployments_at``: the deployments as a live proxy reads
    them per request (a config reload), the candidate's prices times the factor inside the
    event's window; None for any other event."""
    if not event or event.get("kind") != "price":
        return None
    cand, factor = event["candidate"], event["factor"]

    def deployments_at(i: int, deps: dict) -> dict:
        if not event["start"] <= i < event["end"]:
            return deps
        d = deps[cand]
        return {**deps, cand: replace(d, input_cost_per_1m=d.input_cost_per_1m * factor,
                                      output_cost_per_1m=d.output_cost_per_1m * factor)}

    return deployments_at


def generate(name: str, *, n: int = DEFAULT_REQUESTS, n_providers: int = DEFAULT_PROVIDERS,
             seed: int = DEFAULT_SEED) -> tuple[list[dict], dict]:
    """(trace records, metadata) for one scenario. The requests and the candidates' underlying
    draws depend only on the seed (not on the scenario), so scenarios differ only by their event."""
    ps = providers(n_providers)
    event = scenario_event(name, ps, n)
    records = []
    for i, (domain, _, prompt, tin, draws) in enumerate(_requests(ps, n, random.Random(f"aisia-synthetic:{seed}"))):
        outcomes = {}
        for p, u, tout, latency in draws:
            q, price = p.quality[DOMAINS.index(domain)], p.price_per_1m
            kind = event["kind"] if event and event["candidate"] == p.name and event["start"] <= i < event["end"] else None
            if kind == "outage":
                outcomes[p.name] = {"error": "simulated outage: 503 Service Unavailable", "status_code": event["status_code"],
                                    "latency_ms": event["latency_ms"], "cost_usd": 0.0, "input_tokens": tin,
                                    "output_tokens": 0}
                continue
            q *= event["factor"] if kind == "quality" else 1
            latency *= event["factor"] if kind == "latency" else 1
            price *= event["factor"] if kind == "price" else 1
            outcomes[p.name] = _outcome(domain, q, u, tin, tout, latency, price)
        records.append({"id": f"{name}-{i}", "messages": [{"role": "user", "content": prompt}], "label": domain,
                        "outcomes": outcomes})
    meta = {
        "scenario": name, "requests": n, "seed": seed, "event": event,
        "providers": _providers_meta(ps),
        "model": {"domain_mix": DOMAIN_MIX, "graded_domains": sorted(GRADED), "copula_rho": RHO,
                  "latency": f"lognormal, median per provider x (0.5 + 0.5*out_tokens/250), sigma {LATENCY_SIGMA}",
                  "output_tokens": {d: {"median": m, "sigma": s} for d, (m, s) in OUTPUT_TOKENS.items()},
                  "cost": "(input + output tokens) x price per 1M / 1e6"},
    }
    return records, meta


# -- the prompt-aware scenario ----------------------------------------------------------------------
HARD_SHARE = 0.4
SIGNAL_IF_HARD = 0.8
SIGNAL_IF_EASY = 0.15
EASY_ERROR_SHARE = 0.3
HARD_PENALTY = 0.9
HARD_WORDS = {
    "coding": ["Handle every edge case and keep it thread-safe.", "It must run in O(n log n) without any library.",
               "Gère tous les cas limites, sans aucune bibliothèque externe."],
    "math": ["Prove rigorously that the solution is unique.", "Give a formal proof for the general case n.",
             "Démontre rigoureusement le résultat pour tout entier n."],
    "translation": ["Keep the legal nuances and the idioms exact.", "Preserve the wordplay and the archaic register.",
                    "Conserve les nuances juridiques et le jeu de mots."],
    "general": ["Weigh the second-order consequences carefully.", "Reconcile the contradictory constraints below.",
                "Tiens compte des conséquences indirectes et contradictoires."],
}
CONTEXT_SENTENCES = [
    "This is part of a larger project with several teams involved.", "We have tried two approaches already.",
    "The result will be reviewed by an external auditor.", "Le contexte est détaillé dans le document joint.",
    "Our previous attempt was rejected for lack of precision.", "The deadline is tight and the scope may change.",
]
CONSTRAINTS = ["1. state your assumptions", "2. justify each step", "3. list the failure modes",
               "4. give a counter-example", "5. summarise in two lines"]


def _hard_prompt(base: str, domain: str, hard: bool, rng: random.Random) -> str:
    """The base prompt with each difficulty signal added with its probability."""
    p = SIGNAL_IF_HARD if hard else SIGNAL_IF_EASY
    parts = [base]
    if rng.random() < p:
        parts.append(rng.choice(HARD_WORDS[domain]))
    if rng.random() < p:
        parts.append(" ".join(rng.sample(CONTEXT_SENTENCES, 3)))
    if rng.random() < p:
        k = rng.randint(3, len(CONSTRAINTS))
        parts.append("Constraints:\n" + "\n".join(CONSTRAINTS[:k]))
    return " ".join(parts[:2]) + ("\n" + "\n".join(parts[2:]) if len(parts) > 2 else "")


def generate_prompt_aware(*, n: int = DEFAULT_REQUESTS, n_providers: int = DEFAULT_PROVIDERS,
                          seed: int = DEFAULT_SEED) -> tuple[list[dict], dict]:
    """(trace records, metadata) of the prompt-aware scenario (benchmarks/README.md)."""
    ps = providers(n_providers)
    penalty = {p.name: HARD_PENALTY * max(0.0, 0.95 - mean_quality(p)) / 0.45 for p in ps}
    records, hard_ones = [], []
    requests = _requests(ps, n, random.Random(f"aisia-synthetic-prompt:{seed}"), prompt_aware=True)
    for i, (domain, hard, prompt, tin, draws) in enumerate(requests):
        if hard:
            hard_ones.append(i)
        outcomes = {}
        for p, u, tout, latency in draws:
            q = p.quality[DOMAINS.index(domain)]
            q = q * (1.0 - penalty[p.name]) if hard else 1.0 - (1.0 - q) * EASY_ERROR_SHARE
            outcomes[p.name] = _outcome(domain, q, u, tin, tout, latency, p.price_per_1m)
        records.append({"id": f"prompt_aware-{i}", "messages": [{"role": "user", "content": prompt}], "label": domain,
                        "outcomes": outcomes})
    meta = {
        "scenario": "prompt_aware", "requests": n, "seed": seed, "event": None,
        "providers": _providers_meta(ps, hard_penalty=penalty),
        "model": {"hard_share": HARD_SHARE, "signal_if_hard": SIGNAL_IF_HARD, "signal_if_easy": SIGNAL_IF_EASY,
                  "easy_error_share": EASY_ERROR_SHARE, "hard_penalty": HARD_PENALTY, "domain_mix": DOMAIN_MIX,
                  "copula_rho": RHO},
        # The hidden difficulty, for diagnosis only (no router reads it): the hard requests' indices.
        "hard": hard_ones,
    }
    return records, meta


# -- how a router answered an event --------------------------------------------------------------
MOVE_WINDOW = 20
LEAVE_SHARE = 0.2
PRE_WINDOW = 200
EVENT_RESPONSE = (
    f"move-away: after the change at request s, smallest k with the changed candidate X under {LEAVE_SHARE:.0%} of the "
    f"router's first choices in [s+k, s+k+{MOVE_WINDOW}); come-back: after the event ends at e, smallest k with X's "
    f"share of [e+k, e+k+{MOVE_WINDOW}) >= half its share over the {PRE_WINDOW} requests before s; `n/a` when X had "
    f"< {LEAVE_SHARE * 100:.0f} % before s")


def _share(choices, cand, lo, hi):
    seg = choices[max(0, lo):max(0, hi)]
    return (sum(1 for c in seg if c == cand) / len(seg)) if seg else None


def event_response(choices: list, event: Optional[dict]) -> dict:
    """Given each request's first choice, the share of the changed candidate X before, during and
    after the event, and the move-away and come-back delays (EVENT_RESPONSE); {} without event."""
    if not event:
        return {}
    n = len(choices)
    cand, s, e = event["candidate"], event["start"], event["end"]
    pre = _share(choices, cand, s - PRE_WINDOW, s) or 0.0
    res = {"pre_share": round(pre, 4), "during_share": round(_share(choices, cand, s, e) or 0.0, 4),
           "after_share": round(_share(choices, cand, e, n) or 0.0, 4) if e < n else None,
           "move_away": None, "come_back": None}
    if pre < LEAVE_SHARE:
        res["move_away"] = res["come_back"] = "n/a"
        return res
    res["move_away"] = next((k for k in range(0, e - s) if (sh := _share(choices, cand, s + k, s + k + MOVE_WINDOW))
                             is not None and sh < LEAVE_SHARE), "never")
    if e < n:
        res["come_back"] = next((k for k in range(0, n - e - MOVE_WINDOW + 1)
                                 if (sh := _share(choices, cand, e + k, e + k + MOVE_WINDOW)) is not None
                                 and sh >= pre / 2), "never")
    return res


def format_event_response(event: dict, r: dict) -> str:
    """One line: how the router's first choices answered the event (event_response's dict)."""
    after = "" if r["after_share"] is None else f", {r['after_share']:.0%} after"
    return (f"event {event['kind']} on {event['candidate']} [{event['start']}, {event['end']}): the router's first "
            f"choices went to it {r['pre_share']:.0%} of the {PRE_WINDOW} requests before, {r['during_share']:.0%} "
            f"during{after}; move-away {r['move_away']}, come-back {r['come_back']} requests "
            f"(windows of {MOVE_WINDOW}: leaving is under {LEAVE_SHARE:.0%}, coming back half the share before)")


def prompt_signals(text: str) -> tuple[bool, bool, bool]:
    """Which of the prompt_aware generator's difficulty signals the prompt shows (its demanding
    clause, its context sentences, its list of constraints): what a prompt feature could know."""
    return (any(w in text for ws in HARD_WORDS.values() for w in ws),
            any(c in text for c in CONTEXT_SENTENCES), "Constraints:" in text)


def expected_score(meta: dict, domain: str, signals, cand: str) -> float:
    """E[score | domain, the signals the prompt shows] under the prompt_aware generator's model
    (its meta): P(hard | signals) by Bayes, then each difficulty's success probability q'
    (a 1/0 score's mean), or for a graded domain E[clamp(0.5 + q' - u, 0, 1)], u uniform."""
    m = meta["model"]
    p = meta["providers"][cand]
    like = {}
    for hard in (True, False):
        ps = m["signal_if_hard"] if hard else m["signal_if_easy"]
        prior = m["hard_share"] if hard else 1.0 - m["hard_share"]
        like[hard] = prior * math.prod(ps if s else 1.0 - ps for s in signals)
    ph = like[True] / (like[True] + like[False])
    q = p["quality"][domain]
    out = 0.0
    for hard, w in ((True, ph), (False, 1.0 - ph)):
        qq = q * (1.0 - p["hard_penalty"]) if hard else 1.0 - (1.0 - q) * m["easy_error_share"]
        if domain in GRADED:
            a = 0.5 + qq
            e = a * a / 2.0 if a <= 1.0 else 2.0 * a - 1.0 - a * a / 2.0
        else:
            e = qq
        out += w * e
    return out


def candidates_of(meta: dict) -> dict[str, dict]:
    """Replay candidate facts at list price (the price before any price event)."""
    return {n: {"provider": p["provider"], "input_cost_per_1m": p["price_per_1m"], "output_cost_per_1m": p["price_per_1m"]}
            for n, p in meta["providers"].items()}


def write_scenario(out_dir: Path, name: str, records: list[dict], meta: dict) -> Path:
    """A generated scenario written into `out_dir`: its trace, meta and candidates files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.jsonl"
    write_records(path, records)
    (out_dir / f"{name}.meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    write_candidates(out_dir / f"{name}.candidates.yaml", candidates_of(meta), source=f"aisia replay --scenario {name}")
    return path


def generate_scenario(name: str, **kw) -> tuple[list[dict], dict]:
    """(records, meta) of any scenario, by name (ValueError for an unknown one)."""
    return generate_prompt_aware(**kw) if name in PROMPT_SCENARIOS else generate(name, **kw)


def scenario_trace(name: str, records: list[dict]) -> Trace:
    """The records as a replay trace, in memory (they are valid by construction)."""
    return Trace(f"scenario:{name}", [parse_record(r, i, i + 1)[0] for i, r in enumerate(records)])


def scenario_specs(meta: dict) -> dict[str, CandidateSpec]:
    """The replay candidates of a scenario, at list price."""
    return price_specs(candidates_of(meta))
