"""Convert the shared real-outcome data sets (../shared/data, or $AISIA_SHARED_DATA) into replay
traces (the JSON Lines format of ``aisia_plugin/replay/trace.py``), with ``<name>.meta.json``
(source, prices, latency model, seed) and ``<name>.candidates.yaml`` (for ``aisia replay``) beside
each, in benchmarks/out/ (gitignored): the data is never copied into the repository.

    python benchmarks/convert_data.py [--limit N] [--out benchmarks/out]

Candidates, scores, token estimates and prices per data set: benchmarks/README.md ("Data").
Neither set records latencies: for a call with ``out`` output tokens,
    latency_ms = median_ms * (0.3 + 0.7 * out / ref_output_tokens) * exp(sigma * N(0, 1))
with one ``random.Random(f"{seed}:{dataset}:{candidate}")`` stream per candidate. Each trace is
shuffled (``shuffled``) before ``--limit`` applies: the files are ordered by data set."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from typing import Optional

import bench
from bench import shared_data_dir

from aisia_plugin.replay.candidates import write_candidates
from aisia_plugin.replay.trace import write_records

DEFAULT_SEED = 20240601

ROUTELLM_FILE = "routellm_gsm8k_responses.csv"
ROUTERARENA_MODELS = ("gemini-2.0-flash-001", "claude-3-haiku-20240307")
ROUTERARENA_COST_FILE = "routerarena_model_cost.json"

# candidate -> (source column, input USD/1M, output USD/1M)
ROUTELLM_CANDIDATES = {
    "mixtral-8x7b": ("mistralai/Mixtral-8x7B-Instruct-v0.1", 0.6, 0.6),
    "gpt-4-1106": ("gpt-4-1106-preview", 10.0, 30.0),
}
# RouterArena provider names for the candidates files (the name's own prefix would be "gemini"/"claude")
ROUTERARENA_PROVIDERS = {"gemini-2.0-flash-001": "gemini", "claude-3-haiku-20240307": "anthropic"}

# candidate -> (median_ms at ref_output_tokens, ref_output_tokens, sigma)
LATENCY_MODELS = {
    "mixtral-8x7b": (600.0, 150, 0.35),
    "gpt-4-1106": (1500.0, 150, 0.35),
    "gemini-2.0-flash-001": (500.0, 200, 0.35),
    "claude-3-haiku-20240307": (800.0, 200, 0.35),
}


def estimate_tokens(text: str) -> int:
    return max(1, math.ceil(len(text or "") / 4))


def sample_latency(candidate: str, output_tokens: int, rng: random.Random) -> float:
    median, ref, sigma = LATENCY_MODELS[candidate]
    scale = 0.3 + 0.7 * max(0, output_tokens) / ref
    return round(median * scale * math.exp(sigma * rng.gauss(0.0, 1.0)), 1)


def latency_model_text() -> str:
    parts = [f"{c}: median {m:g} ms at {r} output tokens, sigma {s:g}" for c, (m, r, s) in LATENCY_MODELS.items()]
    return ("latency_ms = median * (0.3 + 0.7 * output_tokens / ref) * exp(sigma * N(0,1)), seeded; " + "; ".join(parts))


# -- RouteLLM GSM8K ------------------------------------------------------------------------------
def convert_routellm(data_dir: Path, seed: int = DEFAULT_SEED) -> list[dict]:
    rngs = {c: random.Random(f"{seed}:routellm_gsm8k:{c}") for c in ROUTELLM_CANDIDATES}
    out = []
    for i, row in enumerate(bench.read_csv(data_dir / ROUTELLM_FILE)):
        prompt = row["prompt"]
        tin = estimate_tokens(prompt)
        outcomes = {}
        for cand, (col, pin, pout) in ROUTELLM_CANDIDATES.items():
            tout = estimate_tokens(row.get(f"{col}_response", ""))
            # the correctness columns hold True or False (anything else: a KeyError, not a silent 0)
            outcomes[cand] = {"score": {"True": 1.0, "False": 0.0}[row[col]],
                              "cost_usd": round((tin * pin + tout * pout) / 1e6, 10),
                              "latency_ms": sample_latency(cand, tout, rngs[cand]), "input_tokens": tin,
                              "output_tokens": tout}
        out.append({"id": f"gsm8k-{i}", "messages": [{"role": "user", "content": prompt}], "label": "math",
                    "outcomes": outcomes})
    return out


# -- RouterArena ---------------------------------------------------------------------------------
def convert_routerarena(data_dir: Path, seed: int = DEFAULT_SEED) -> list[dict]:
    cands = routerarena_candidates(data_dir)
    per_model = {m: {str(r["global_index"]): r for r in bench.read_jsonl(data_dir / f"routerarena_{m}.jsonl")}
                 for m in ROUTERARENA_MODELS}
    rngs = {m: random.Random(f"{seed}:routerarena:{m}") for m in ROUTERARENA_MODELS}
    out = []
    for gi in per_model[ROUTERARENA_MODELS[0]]:
        if not all(gi in per_model[m] for m in ROUTERARENA_MODELS):
            continue  # only prompts answered by both models
        outcomes = {}
        for m in ROUTERARENA_MODELS:
            r = per_model[m][gi]
            usage, ev = r.get("token_usage") or {}, r.get("evaluation_result") or {}
            tin, tout = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
            cost = ev.get("inference_cost")
            if cost is None:
                cost = (tin * cands[m]["input_cost_per_1m"] + tout * cands[m]["output_cost_per_1m"]) / 1e6
            o = {"cost_usd": float(cost), "latency_ms": sample_latency(m, tout, rngs[m]),
                 "input_tokens": tin, "output_tokens": tout}
            if r.get("success") is False:
                o["error"] = str(r.get("error") or "call failed")
            else:
                o["score"] = min(1.0, max(0.0, float(ev.get("score") or 0.0)))
            outcomes[m] = o
        out.append({"id": gi, "messages": [{"role": "user", "content": per_model[ROUTERARENA_MODELS[0]][gi]["question"]}],
                    "label": gi.rsplit("_", 1)[0], "outcomes": outcomes})  # the label: the source dataset
    return out


def routellm_candidates() -> dict[str, dict]:
    return {c: {"provider": c.split("-")[0], "input_cost_per_1m": pin, "output_cost_per_1m": pout}
            for c, (_, pin, pout) in ROUTELLM_CANDIDATES.items()}


def routerarena_candidates(data_dir: Path) -> dict[str, dict]:
    table = json.loads((data_dir / ROUTERARENA_COST_FILE).read_text(encoding="utf-8"))
    return {m: {"provider": ROUTERARENA_PROVIDERS[m], **{f"{k}_cost_per_1m": float(
        (table.get(m) or {}).get(f"{k}_token_price_per_million", 0.0)) for k in ("input", "output")}}
            for m in ROUTERARENA_MODELS}


def shuffled(records: list[dict], name: str, seed: int = DEFAULT_SEED) -> list[dict]:
    """The records in a seeded random order: real traffic arrives mixed, and the files are
    ordered (RouterArena by data set), which a learner replayed in file order would exploit."""
    out = list(records)
    random.Random(f"{seed}:shuffle:{name}").shuffle(out)
    return out


def convert_all(out_dir: Path = bench.OUT, *, limit: Optional[int] = None, seed: int = DEFAULT_SEED,
                data_dir: Optional[Path] = None) -> dict[str, tuple[Path, dict]]:
    """Each data set converted into ``out_dir``: name -> (its trace, its candidates)."""
    data_dir = data_dir or shared_data_dir()
    written = {}
    jobs = [
        ("routellm_gsm8k", convert_routellm, routellm_candidates(), ROUTELLM_FILE,
         "score from RouteLLM's True/False correctness columns; tokens estimated as chars/4 (prompt, response)"),
        ("routerarena", convert_routerarena, routerarena_candidates(data_dir),
         "routerarena_<model>.jsonl joined on global_index",
         "score = evaluation_result.score; cost = evaluation_result.inference_cost; tokens from token_usage"),
    ]
    for name, fn, cands, source, notes in jobs:
        records = shuffled(fn(data_dir, seed), name, seed)[:limit]
        path = out_dir / f"{name}.jsonl"
        write_records(path, records)
        write_candidates(out_dir / f"{name}.candidates.yaml", cands, source="benchmarks/convert_data.py")
        meta = {"name": name, "source": source, "data_dir": str(data_dir), "requests": len(records), "seed": seed,
                "candidates": cands, "prices_usd_per_1m": {c: [v["input_cost_per_1m"], v["output_cost_per_1m"]] for c, v in cands.items()},
                "latency_model": latency_model_text(), "notes": notes}
        (out_dir / f"{name}.meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        written[name] = path, cands
    return written


def main(argv=None) -> int:
    args = bench.arguments(__doc__, argv, out=str(bench.OUT), seed=DEFAULT_SEED,
                           limit=(int, "convert only the first N prompts of each data set"))
    for name, (path, _) in convert_all(Path(args.out), limit=args.limit, seed=args.seed).items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
