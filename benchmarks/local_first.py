"""Local-first with escalation (docs/local-first.md) through a real LiteLLM proxy: the threshold's curve.

    .venv/bin/python benchmarks/local_first.py [--requests 300] [--thresholds 0,0.5,0.6,0.7,0.75,0.8,0.9,1]
                                               [--concurrency 4] [--seed 0] [--no-write]

Two simulated upstreams over HTTP (``aisia_plugin.demo.upstream``), behind a real proxy with the
plugin: ``gpu``, a self-hosted model (``hosted_vllm/``: local by its provider) good on general
questions and poor on math and code, which returns its tokens' log-probabilities when asked (each
token's probability: the answer's quality plus a normal draw of sd 0.15, so its certainty tells
right from wrong imperfectly); ``cloud``, a frontier-priced model good on everything. The same
seeded prompts (half general, a quarter math, a quarter code) are sent with the ``openai`` client
to one alias per arm, each arm on a fresh proxy (nothing learned carries over):

- ``local-first t``: ``local_first: {enabled: true, min_confidence: t}`` over both deployments;
  t = 0 never escalates (always local);
- ``always-cloud``: the cloud deployment alone.

The simulated quality of each answer (the upstream writes it in its reply) stays in this process:
the router sees the log-probabilities, the answer and what it learned, nothing else. Per arm:
the share answered locally, the mean quality (and as a share of always-cloud's), the cost as
LiteLLM billed both calls of an escalated request (the decision log's outcome records) and as a
share of always-cloud's, the quality random mixing of the two fixed arms reaches at that cost
(linear between always-local and always-cloud) and the gain over it, and the client's latency:
p50 of all requests, p50 of the escalated ones, and what an escalation adds over sending the
request to the cloud directly (p50 escalated - p50 always-cloud). Writes
benchmarks/results/local_first.{json,md} and the curve into benchmarks/RESULTS.md (run_all.py
renders the same section from the JSON)."""

from __future__ import annotations

import json
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bench  # first: LiteLLM offline, the repository importable
import openai

from aisia_plugin.demo.proxy import deployment, start_proxy
from aisia_plugin.demo.upstream import parse_reply, start_upstreams, stop_upstreams

ALIAS = "bench/local-first"
SPECS = [
    {"name": "gpu", "model": "llama-8b", "default_strength": 0.9, "strengths": {"math": 0.3, "coding": 0.35},
     "logprobs": True, "logprob_noise": 0.15, "latency_ms": 80, "input_cost_per_1m": 0.1,
     "output_cost_per_1m": 0.2, "seed": 11, "reply_words": 40},
    {"name": "cloud", "model": "frontier", "default_strength": 0.92, "latency_ms": 300, "input_cost_per_1m": 2.5,
     "output_cost_per_1m": 10.0, "seed": 12, "reply_words": 40},
]
GENERAL = ["What is the capital of {c}?", "Give me {n} tips for {t}.", "Who wrote {b}?", "Suggest a name for a {s}.",
           "How many legs does a {a} have?"]
MATH = ["What is the derivative of x^{n} + {m}x?", "Compute the integral of x^{n} from 0 to {m}.",
        "Calculate the probability of rolling {n} sixes with {m} dice."]
CODE = ["Write a Python function that {f}.", "Fix the bug in this JavaScript code: for (i=0;i<{n};i++) {{ {f} }}"]
SLOTS = {"c": ["Canada", "Peru", "Kenya", "Norway", "Japan", "Chile", "Egypt"],
         "t": ["a job interview", "sleeping better", "learning guitar", "saving money"],
         "b": ["Pride and Prejudice", "Moby Dick", "Dracula", "Emma"], "s": ["bakery", "bookshop", "bike shop"],
         "a": ["spider", "crab", "beetle", "lobster"],
         "f": ["reverses a linked list", "merges two sorted lists", "parses a CSV line", "counts words in a file"]}


def prompts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = rng.random()
        pool = GENERAL if kind < 0.5 else MATH if kind < 0.75 else CODE
        fill = {k: rng.choice(v) for k, v in SLOTS.items()}
        out.append(rng.choice(pool).format(n=rng.randint(2, 9), m=rng.randint(2, 9), **fill) + f" (#{i})")
    return out


def policy(threshold, log: Path) -> str:
    lf = "{enabled: true, min_confidence: %s}" % threshold if threshold is not None else "{enabled: false}"
    models = "[gpu-model, cloud-model]" if threshold is not None else "[cloud-model]"
    return (f"version: 1\nlogging: {{decisions: {{path: {json.dumps(str(log))}}}}}\naliases:\n  {ALIAS}:\n"
            f"    description: the benchmark's arm\n    strategy: cost\n    candidates: {{models: {models}}}\n"
            f"    local_first: {lf}\n")


def ask(client, text: str) -> dict:
    started = time.perf_counter()
    raw = client.chat.completions.with_raw_response.create(model=ALIAS, messages=[{"role": "user", "content": text}])
    latency = time.perf_counter() - started
    served, quality = parse_reply(raw.parse().choices[0].message.content)
    reason = raw.headers.get("x-aisia-reason", "")
    return {"served": served, "quality": quality, "latency_s": latency, "escalated": "escalated to" in reason}


def run_arm(name: str, threshold, texts: list[str], upstreams: dict, work: Path, concurrency: int) -> dict:
    folder = work / name.replace(" ", "_")
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "decisions.jsonl"
    log.unlink(missing_ok=True)  # (the decision log appends: a previous run's records out)
    (folder / "policy.yaml").write_text(policy(threshold, log))
    gpu = deployment("gpu", upstreams["gpu"], litellm_params={"model": "hosted_vllm/llama-8b"})
    gpu["model_name"] = "gpu-model"
    cloud = deployment("cloud", upstreams["cloud"])
    cloud["model_name"] = "cloud-model"
    config = {"model_list": [gpu, cloud], "router_settings": {"num_retries": 2, "timeout": 60},
              "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin"], "request_timeout": 60}}
    bench.progress(f"{name}: starting a proxy")
    proxy = start_proxy(config, folder, env={"AISIA_POLICY": str(folder / "policy.yaml")})
    try:
        client = openai.OpenAI(base_url=proxy.base_url, api_key=proxy.master_key, max_retries=0, timeout=120)
        with ThreadPoolExecutor(concurrency) as pool:
            rows = list(pool.map(lambda t: ask(client, t), texts))
    finally:
        proxy.stop()  # the decision log is flushed at exit
    costs = [r.get("cost_usd") or 0.0 for r in bench.read_jsonl(log) if r.get("type") == "outcome"]
    return measure(name, threshold, rows, sum(costs), len(costs))


def measure(name: str, threshold, rows: list[dict], cost: float, calls: int) -> dict:
    lat = sorted(r["latency_s"] for r in rows)
    esc = sorted(r["latency_s"] for r in rows if r["escalated"])
    return {"arm": name, "threshold": threshold, "requests": len(rows), "upstream_calls": calls,
            "local_share": sum(r["served"] == "gpu" for r in rows) / len(rows),
            "escalated_share": len(esc) / len(rows),
            "quality": statistics.fmean(r["quality"] or 0.0 for r in rows), "cost_usd": cost,
            "p50_latency_s": bench.percentile(lat, 0.5), "p50_escalated_s": bench.percentile(esc, 0.5) if esc else None}


def compare(arms: list[dict]) -> list[dict]:
    """Each arm beside always-cloud and random mixing of the two fixed arms at its cost."""
    cloud = next(a for a in arms if a["threshold"] is None)
    local = next((a for a in arms if a["threshold"] == 0), None)
    for a in arms:
        a["quality_vs_cloud"] = a["quality"] / cloud["quality"] if cloud["quality"] else None
        a["cost_vs_cloud"] = a["cost_usd"] / cloud["cost_usd"] if cloud["cost_usd"] else None
        a["cost_saved"] = 1.0 - a["cost_vs_cloud"] if a["cost_vs_cloud"] is not None else None
        a["added_latency_s"] = (a["p50_escalated_s"] - cloud["p50_latency_s"]) if a["p50_escalated_s"] else None
        a["mixing_quality"] = a["gain_over_mixing"] = None
        if local is not None and cloud["cost_usd"] > local["cost_usd"]:
            share = min(1.0, max(0.0, (a["cost_usd"] - local["cost_usd"]) / (cloud["cost_usd"] - local["cost_usd"])))
            a["mixing_quality"] = local["quality"] + share * (cloud["quality"] - local["quality"])
            a["gain_over_mixing"] = a["quality"] - a["mixing_quality"]
    return arms


def _f(v, spec="{:.2f}"):
    return "-" if v is None else spec.format(v)


def table(report: dict) -> list[str]:
    rows = [[a["arm"], _f(a["local_share"], "{:.0%}"), _f(a["quality"], "{:.3f}"), _f(a["quality_vs_cloud"]),
             _f(a["cost_usd"] * 1000 / a["requests"], "{:.3f}"), _f(a["cost_saved"], "{:.0%}"),
             _f(a["gain_over_mixing"], "{:+.3f}"), _f(a["p50_latency_s"] * 1000, "{:.0f}"),
             _f(a["p50_escalated_s"] and a["p50_escalated_s"] * 1000, "{:.0f}"),
             _f(a["added_latency_s"] and a["added_latency_s"] * 1000, "{:+.0f}")] for a in report["arms"]]
    return bench.md_table(["arm", "answered locally", "quality", "vs always-cloud", "USD / 1k req", "cost saved",
                           "gain over mixing", "p50 ms", "p50 escalated ms", "escalation adds ms"], rows, "---:")


def intro(report: dict) -> list[str]:
    c = report["conditions"]
    return [f"{report['requests']} prompts (half general, a quarter math, a quarter code; seed {report['seed']}), "
            f"{report['concurrency']} in flight, one fresh proxy per arm (LiteLLM {c.get('litellm')}, "
            f"{c.get('cpu_count')} cores, load {c.get('load_average_1_5_15')}). `gpu` (hosted_vllm, local; $0.1/$0.2 per 1M, "
            "80 ms): quality 0.9 on general questions, 0.3 on math, 0.35 on code; its tokens' probability is the "
            "answer's quality plus N(0, 0.15). `cloud` ($2.5/$10, 300 ms): 0.92 everywhere. Cost: LiteLLM's bill of "
            "every call (both calls of an escalated request); mixing: always-local and always-cloud mixed at the "
            "arm's cost. From `benchmarks/local_first.py`."]


def markdown(report: dict) -> str:
    return "\n".join(["# Local-first with escalation: the threshold's curve", "", *intro(report), "",
                      *table(report), ""]) + "\n"


def results_lines(report: dict) -> list[str]:
    """RESULTS.md's section (run_all.py renders it from results/local_first.json too)."""
    return ["## Local-first with escalation (issue 39)", "", *intro(report), "", *table(report), "",
            "Definitions: [docs/local-first.md](../docs/local-first.md); the threshold curve as a plot: "
            "[results/local_first.png](results/local_first.png) when matplotlib was installed.", ""]


def plot(report: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    arms = [a for a in report["arms"] if a["threshold"] is not None]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([a["threshold"] for a in arms], [a["quality_vs_cloud"] for a in arms], "o-", label="quality / always-cloud")
    ax.plot([a["threshold"] for a in arms], [a["cost_vs_cloud"] for a in arms], "s-", label="cost / always-cloud")
    ax.plot([a["threshold"] for a in arms], [a["local_share"] for a in arms], "^-", label="answered locally")
    ax.set_xlabel("local_first.min_confidence")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def splice_results(lines: list[str], path: Path = bench.HERE / "RESULTS.md") -> None:
    """The local-first section of RESULTS.md replaced (or put before the decision overhead's)."""
    text = path.read_text(encoding="utf-8")
    head, marker, end = "## Local-first with escalation (issue 39)", "## Decision overhead", None
    start = text.find(head)
    stop = text.find(marker)
    if start < 0:
        start = end = stop
    else:
        end = stop
    path.write_text(text[:start] + "\n".join(lines) + "\n" + text[end:], encoding="utf-8")


def main(argv=None) -> int:
    args = bench.arguments(__doc__, argv, requests=300, thresholds="0,0.5,0.6,0.7,0.75,0.8,0.9,1", concurrency=4,
                           seed=0, no_write=(False, "print only"))
    texts = prompts(args.requests, args.seed)
    upstreams = {u.name: u for u in start_upstreams(SPECS)}
    work = bench.OUT / "local_first"
    arms = []
    try:
        for t in [None] + [float(x) for x in args.thresholds.split(",")]:
            name = "always-cloud" if t is None else ("always-local (t=0)" if t == 0 else f"local-first t={t:g}")
            arms.append(run_arm(name, t, texts, upstreams, work, args.concurrency))
            bench.progress(f"{name}: {json.dumps({k: arms[-1][k] for k in ('local_share', 'quality', 'cost_usd')})}")
    finally:
        stop_upstreams(list(upstreams.values()))
    report = {"requests": args.requests, "seed": args.seed, "concurrency": args.concurrency,
              "conditions": bench.conditions(), "arms": compare(arms)}
    print(markdown(report))
    if not args.no_write:
        bench.write_results("local_first", report, markdown(report))
        plot(report, bench.RESULTS / "local_first.png")
        splice_results(results_lines(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
