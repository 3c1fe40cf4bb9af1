"""Routers judged on simulated conversations through a real LiteLLM proxy (issue 40).

    .venv/bin/python benchmarks/conversation_bench.py [--quick] [--workloads two_tier,three_tier] [--arms ours,oracle]
                                                      [--conversations N] [--seed 0] [--concurrency 6] [--no-write]
                                                      [--no-system-message] [--out NAME] [--render-only]

Each workload of ``conversations.WORKLOADS`` (default: two_tier): its conversations
(``conversations.Conversation``, pure and seeded) are sent turn by turn with the ``openai``
client to a real LiteLLM proxy, ``--concurrency`` conversations in flight, no feedback call. The
deployments are fake upstreams (``aisia_plugin.demo.upstream``) in this process whose answers
are judged right or wrong by ``conversations.TruthRegistry`` from the deployment's accuracy on
the task's group; the verdict stays in this process (no router receives it).

Arms (``--arms``, default all; each on a fresh proxy of its kind, so no arm learns from another):
  ours                 the plugin's ``auto`` alias as shipped (the deployments' tiers declared in a team
                       policy, as an operator would): it learns from the conversation signals alone
  ours+judge           the same with a sampled judge (``quality.judge``): the frontier deployment grades
                       2 % of the answers in the background (``conversations.grader_reply``: a judge that
                       agrees with the truth on 90 % of the answers); its calls' cost is the arm's too
  ours+feedback        the same with explicit feedback: the client posts each task answer's verdict to
                       ``/aisia/feedback`` (1 right, 0 wrong), as a client with a thumbs-up button
                       that every user pressed would: the ceiling of what a router can be told
  always:<id>          every turn to one deployment (one arm per deployment)
  oracle               knows each turn's task group: the cheapest deployment within the workload's
                       oracle tolerance of the best accuracy on it (a turn without a task: the cheapest)
  random               a uniform random deployment per turn
  litellm-adaptive     LiteLLM's adaptive router (``auto_router/adaptive_router``: Thompson sampling per
                       request type and model, signals read from the conversation), the declared tiers as
                       its ``quality_tier`` priors, default weights
  litellm-complexity   LiteLLM's complexity router (``auto_router/complexity_router``, its default local
                       heuristic classifier): SIMPLE and MEDIUM to the cheapest deployment (three tiers: the
                       cheapest and the middle one), COMPLEX and REASONING to the frontier; its heuristic scores
                       short questions SIMPLE or MEDIUM, so the choice for MEDIUM decides it:
  litellm-complexity-medium-up   the same with MEDIUM to the frontier (not in the default arms)

Measures over the last half of the conversations (by index): quality = the share of answers to a
task that were right; cost = every request's tokens at the serving deployment's prices; both as a
share of the always-best deployment's (the fixed arm of the highest quality); the frontier
deployment's share of the turns of the hard groups (those the oracle does not send to the cheapest
deployment) and of the easy ones; the best mixture of the fixed arms at the same cost.

Writes benchmarks/results/conversations.{json,md} (quoted by run_all.py in RESULTS.md)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Optional

import bench  # first: LiteLLM offline, the repository importable
import yaml
from conversations import (GRADER_AGREEMENT, WORKLOADS, Conversation, QuestionBank, TruthRegistry, Turn, Workload,
                           answer_text, grader_reply, quoted_answer)
from team_keys import CALLBACK as TEAM_KEYS_AUTH
from team_keys import team_keys

from aisia_plugin.demo.proxy import Proxy, deployment
from aisia_plugin.demo.upstream import UpstreamSpec, start_upstreams, stop_upstreams, usage_of

FULL_CONVERSATIONS, QUICK_CONVERSATIONS = 1500, 150
PLUGIN_CALLBACK = "aisia_plugin.litellm.plugin"
ADAPTIVE, COMPLEXITY = "adaptive-router", "complexity-router"
BASE_ARMS = ("ours", "ours+judge", "ours+feedback", "always", "oracle", "random", "litellm-adaptive",
             "litellm-complexity")
UPSTREAM_LATENCY_MS = 15.0
TRUSTED_KEY_SIGNALS_PER_HOUR = 100000  # the bench's one key stands for a chat front-end (team_policy)
JUDGE_SAMPLE_RATE = 0.02  # ours+judge: the share of answers graded (issue 40's "2 % judge")
JUDGE_DAILY_USD_CAP = 1000.0  # far above what a run spends: the cap never binds here
TEAMS = 3  # ours:teams: the users spread over this many teams' keys


# -- the arms -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Arm:
    """``proxy``: the kind of proxy it runs on (ours, plain, adaptive, complexity); ``model(turn,
    rng)``: the model name it asks the proxy for; ``policy``: settings laid over the team policy
    (``ours`` only); ``feedback``: the client posts each task answer's verdict to the proxy;
    ``teams``: the conversations spread over that many teams' keys (LiteLLM's custom_auth,
    team_keys.py), each conversation through one of them (0: all through the master key)."""

    name: str
    proxy: str
    model: Callable[[Turn, random.Random], str]
    policy: Optional[dict] = None
    feedback: bool = False
    teams: int = 0


def arms_of(workload: Workload, names: list[str], n: int) -> list[Arm]:
    ids = [d.id for d in workload.deployments]
    out: list[Arm] = []
    for name in names:
        if name == "ours":
            out.append(Arm("ours", "ours", lambda t, r: "auto"))
        elif name == "ours+judge":
            judge = {"deployment": workload.frontier.id, "sample_rate": JUDGE_SAMPLE_RATE,
                     "daily_usd_cap": JUDGE_DAILY_USD_CAP}
            out.append(Arm(name, "ours", lambda t, r: "auto", policy={"quality": {"judge": judge}}))
        elif name == "ours+feedback":
            out.append(Arm(name, "ours", lambda t, r: "auto", feedback=True))
        elif name == "ours:teams":
            out.append(Arm(name, "ours", lambda t, r: "auto", teams=TEAMS))
        elif name == "always":
            out += [Arm(f"always:{d}", "plain", lambda t, r, d=d: d) for d in ids]
        elif name.startswith("always:") and name[7:] in ids:
            out.append(Arm(name, "plain", lambda t, r, d=name[7:]: d))
        elif name == "oracle":
            out.append(Arm("oracle", "plain", lambda t, r: workload.oracle_choice(
                t.task.group if t.task else None, t.conversation / max(1, n))))
        elif name == "random":
            out.append(Arm("random", "plain", lambda t, r: r.choice(ids)))
        elif name == "litellm-adaptive":
            out.append(Arm(name, "adaptive", lambda t, r: ADAPTIVE))
        elif name in ("litellm-complexity", "litellm-complexity-medium-up"):
            out.append(Arm(name, name[len("litellm-"):], lambda t, r: COMPLEXITY))
        else:
            raise SystemExit(f"unknown arm {name!r} (known: {', '.join(BASE_ARMS)}, ours:teams, always:<deployment id>)")
    return out


# -- proxies --------------------------------------------------------------------------------------
def by_price(workload: Workload):
    return sorted(workload.deployments, key=lambda d: (d.input_per_1m + d.output_per_1m, d.id))


def proxy_config(workload: Workload, upstreams: dict, kind: str) -> dict:
    """The LiteLLM config of one kind of proxy over the workload's upstreams."""
    models = []
    for d in workload.deployments:
        entry = deployment(d.id, upstreams[d.id])
        if kind == "adaptive":
            entry["model_info"]["adaptive_router_preferences"] = {"quality_tier": d.quality_tier, "strengths": []}
        models.append(entry)
    cheap = by_price(workload)
    if kind == "adaptive":
        models.append({"model_name": ADAPTIVE, "litellm_params": {
            "model": "auto_router/adaptive_router", "adaptive_router_default_model": cheap[0].id,
            "adaptive_router_config": {"available_models": [d.id for d in workload.deployments],
                                       "weights": {"quality": 0.7, "cost": 0.3}}}})
    if kind.startswith("complexity"):
        top = workload.frontier.id
        low, mid = cheap[0].id, cheap[1].id if len(cheap) > 2 else cheap[0].id
        mid = top if kind == "complexity-medium-up" else mid
        models.append({"model_name": COMPLEXITY, "litellm_params": {
            "model": "auto_router/complexity_router", "complexity_router_default_model": top,
            "complexity_router_config": {"tiers": {"SIMPLE": low, "MEDIUM": mid, "COMPLEX": top, "REASONING": top},
                                         # compaction would call a model near the context limit: never here
                                         "context_compaction": False}}})
    config = {"model_list": models, "router_settings": {"routing_strategy": "simple-shuffle", "num_retries": 0}}
    if kind == "ours":
        config["litellm_settings"] = {"callbacks": [PLUGIN_CALLBACK]}
    return config


def team_policy(workload: Workload, settings: Optional[dict] = None) -> str:
    """What an operator declares about the deployments (their tiers), layered over the shipped
    policy, with an arm's own `settings` (``Arm.policy``)."""
    # The simulated users all come through one API key, as a chat front-end's do: its operator
    # lifts the per-key bound on signals (signals.max_signals_per_key_hour, 20 by default), which
    # would otherwise keep 20 signals an hour per deployment of the whole front-end's traffic.
    return yaml.safe_dump({"version": 1, "deployments": {d.id: {"tier": d.tier} for d in workload.deployments},
                           "signals": {"max_signals_per_key_hour": TRUSTED_KEY_SIGNALS_PER_HOUR},
                           **(settings or {})}, sort_keys=False)


# -- one arm's run --------------------------------------------------------------------------------
@dataclass
class TurnRecord:
    conversation: int
    number: int
    kind: str
    group: Optional[str]
    attempt: int
    deployment: Optional[str]
    correct: Optional[bool]
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    error: Optional[str] = None


async def run_arm(proxy: Proxy, arm: Arm, workload: Workload, registry_holder: dict, n: int, seed: int,
                  concurrency: int) -> tuple[list[TurnRecord], dict]:
    import httpx
    from openai import AsyncOpenAI

    registry = registry_holder["registry"] = TruthRegistry(workload, seed, n)
    bank = QuestionBank()
    conversations = [Conversation(i, workload, bank, seed, n) for i in range(n)]  # drawn in order: seeded
    records: list[TurnRecord] = []
    keys = team_keys(arm.teams) if arm.teams else [proxy.master_key]
    clients = [AsyncOpenAI(base_url=proxy.base_url, api_key=k, max_retries=0, timeout=120) for k in keys]
    admin = httpx.AsyncClient(base_url=proxy.url, headers={"Authorization": f"Bearer {proxy.master_key}"}, timeout=30)
    queue = list(range(n))[::-1]
    feedback = {"posted": 0, "refused": 0}

    async def ask(client, model: str, turn: Turn):
        """The reply, and the plugin's id of the request when the arm posts feedback."""
        if not arm.feedback:
            return await client.chat.completions.create(model=model, messages=turn.request_messages()), None
        raw = await client.chat.completions.with_raw_response.create(model=model, messages=turn.request_messages())
        return raw.parse(), raw.headers.get("x-aisia-request-id")

    async def post_feedback(request_id: Optional[str], correct: Optional[bool]) -> None:
        if request_id is None or correct is None:
            return
        r = await admin.post("/aisia/feedback", json={"request_id": request_id, "score": 1.0 if correct else 0.0})
        feedback["posted" if r.status_code == 200 else "refused"] += 1

    async def worker():
        while queue:
            conv = conversations[queue.pop()]
            rng = random.Random(f"arm:{seed}:{arm.name}:{conv.index}")
            client = clients[conv.index % len(clients)]  # (its team's key)
            while (turn := conv.next_turn()) is not None:
                key = registry.expect(turn)
                model = arm.model(turn, rng)
                try:
                    reply, request_id = await ask(client, model, turn)
                except Exception as exc:  # counted, and the user leaves
                    registry.take(key)
                    records.append(TurnRecord(conv.index, turn.number, turn.kind, turn.task and turn.task.group,
                                              turn.attempt, None, None, 0, 0, 0.0, f"{type(exc).__name__}: {exc}"[:200]))
                    conv.answered("", None)
                    break
                verdict = registry.take(key)
                usage = reply.usage
                served = verdict.deployment if verdict else None
                pt, ct = (usage.prompt_tokens, usage.completion_tokens) if usage else (0, 0)
                cost = workload.deployment(served).cost_usd(pt, ct) if served else 0.0
                records.append(TurnRecord(conv.index, turn.number, turn.kind, turn.task and turn.task.group,
                                          turn.attempt, served, verdict.correct if verdict else None, pt, ct, cost,
                                          None if verdict else "no verdict (the upstream did not recognise the request)"))
                if arm.feedback:
                    await post_feedback(request_id, verdict.correct if verdict else None)
                conv.answered(reply.choices[0].message.content or "", verdict.correct if verdict else None)

    t0 = time.monotonic()
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = round(time.monotonic() - t0, 1)
        run = {"wall_s": wall, "unknown_requests": registry.unknown_requests}
        if arm.feedback:
            run["feedback"] = feedback
        if arm.policy and "judge" in arm.policy.get("quality", {}):
            run["judge"] = await judge_counts(admin)
    finally:
        for client in clients:
            await client.close()
        await admin.aclose()
    return records, {**run, "grades": list(registry.grades)}


async def judge_counts(admin, settle_s: float = 30.0) -> dict:
    """The proxy's own account of its judge (``/aisia/metrics``, read with prometheus_client's
    parser): calls by outcome, spend, and agreement with the conversation signals by result; read
    once the judge's queue has settled (two equal reads a second apart, within `settle_s`)."""
    from prometheus_client.parser import text_string_to_metric_families

    last, deadline = None, time.monotonic() + settle_s
    while True:
        r = await admin.get("/aisia/metrics")
        r.raise_for_status()
        counts: dict = {"calls": {}, "spend_usd": 0.0, "agreement": {}}
        for family in text_string_to_metric_families(r.text):
            for sample in family.samples:
                if sample.name == "aisia_judge_spend_usd_total":
                    counts["spend_usd"] = sample.value
                elif sample.name == "aisia_judge_calls_total" and sample.value:
                    counts["calls"][sample.labels["outcome"]] = sample.value
                elif sample.name == "aisia_judge_agreement_total" and sample.value:
                    counts["agreement"][sample.labels["result"]] = sample.value
        if counts == last or time.monotonic() > deadline:
            return counts
        last = counts
        await asyncio.sleep(1.0)


# -- measures -------------------------------------------------------------------------------------
def measure(records: list[TurnRecord], workload: Workload, n: int, grades: Optional[list] = None) -> dict:
    """The figures of one arm over the last half of the conversations; `grades`, the judge's calls
    as (conversation, USD) (``TruthRegistry.grades``): their cost in the last half is the arm's too."""
    half = [r for r in records if r.conversation >= n // 2]
    scored = [r for r in half if r.group is not None and r.correct is not None]
    hard = set(workload.hard_groups(1.0))
    frontier = workload.frontier.id
    tasks = [r for r in half if r.group is not None and r.deployment is not None]

    def frontier_share(rows):
        return sum(r.deployment == frontier for r in rows) / len(rows) if rows else None

    by_kind: dict[str, int] = {}
    for r in half:
        by_kind[r.kind] = by_kind.get(r.kind, 0) + 1
    served: dict[str, int] = {}
    for r in half:
        if r.deployment:
            served[r.deployment] = served.get(r.deployment, 0) + 1
    judged = [usd for conversation, usd in grades or () if conversation is not None and conversation >= n // 2]
    judge = {"judge_calls": len(judged), "judge_usd": sum(judged), "judge_calls_all": len(grades),
             "judge_usd_all": sum(usd for _, usd in grades)} if grades is not None else {}
    return {"conversations": n - n // 2, "requests": len(half), "answers_scored": len(scored),
            "quality": sum(r.correct for r in scored) / len(scored) if scored else None,
            "cost_usd": sum(r.cost_usd for r in half) + sum(judged), **judge,
            "frontier_share_hard": frontier_share([r for r in tasks if r.group in hard]),
            "frontier_share_easy": frontier_share([r for r in tasks if r.group not in hard]),
            "served": dict(sorted(served.items())), "turns_by_kind": dict(sorted(by_kind.items())),
            "errors": sum(r.error is not None for r in records),
            "requests_all": len(records)}


def mixing_quality(fixed: list[tuple[float, float]], cost: float) -> Optional[float]:
    """The best quality a random mixture of the fixed arms ((cost, quality) each) reaches at
    ``cost``: the upper concave hull, flat beyond its ends."""
    pts = sorted(fixed)
    if not pts:
        return None
    hull: list[tuple[float, float]] = []
    for p in pts:
        if hull and p[1] <= hull[-1][1]:
            continue  # dearer and no better: never on the upper side
        while len(hull) >= 2 and (hull[-1][0] - hull[-2][0]) * (p[1] - hull[-2][1]) >= (p[0] - hull[-2][0]) * (
                hull[-1][1] - hull[-2][1]):
            hull.pop()
        hull.append(p)
    if cost <= hull[0][0]:
        return hull[0][1]
    for (c0, q0), (c1, q1) in zip(hull, hull[1:]):
        if c0 <= cost <= c1:
            return q0 + (q1 - q0) * (cost - c0) / (c1 - c0)
    return hull[-1][1]


def compare(arms: dict[str, dict]) -> dict:
    """Each arm's quality and cost as shares of the always-best deployment's, and its quality
    beside the best mixture of the fixed arms at its cost."""
    fixed = {k: v for k, v in arms.items() if k.startswith("always:") and v["quality"] is not None}
    if not fixed:
        return {"always_best": None}
    best = max(fixed, key=lambda k: (fixed[k]["quality"], -fixed[k]["cost_usd"]))
    bq, bc = fixed[best]["quality"], fixed[best]["cost_usd"]
    points = [(v["cost_usd"], v["quality"]) for v in fixed.values()]
    for v in arms.values():
        if v["quality"] is None:
            continue
        v["quality_share"] = v["quality"] / bq if bq else None
        v["cost_share"] = v["cost_usd"] / bc if bc else None
        mix = mixing_quality(points, v["cost_usd"])
        v["mixing_quality_share"] = mix / bq if mix is not None and bq else None
    return {"always_best": best}


# -- a workload -----------------------------------------------------------------------------------
def run_workload(workload: Workload, arm_names: list[str], n: int, seed: int, concurrency: int, work: Path,
                 commit: str = "") -> dict:
    holder: dict = {}

    def responder(name: str, messages: list) -> str:
        registry = holder.get("registry")
        if registry is None:
            return answer_text(name, None, seed)
        graded = quoted_answer(messages)
        if graded is not None:  # a call of the router's judge (ours+judge), priced as the deployment's
            reply, conversation = grader_reply(registry, graded, seed)
            usage = usage_of(messages, reply)
            registry.graded(conversation, workload.deployment(name).cost_usd(usage["prompt_tokens"],
                                                                             usage["completion_tokens"]))
            return reply
        turn, right = registry.judge(name, messages)
        text = answer_text(name, turn, seed)
        registry.answered(text, turn, right)
        return text

    specs = [UpstreamSpec(d.id, input_cost_per_1m=d.input_per_1m, output_cost_per_1m=d.output_per_1m,
                          latency_ms=UPSTREAM_LATENCY_MS, responder=responder, seed=seed) for d in workload.deployments]
    running = start_upstreams(specs)
    upstreams = {u.name: u for u in running}
    results: dict[str, dict] = {}
    try:
        arms = arms_of(workload, arm_names, n)
        for kind in dict.fromkeys(a.proxy for a in arms):  # one proxy per kind, its arms in turn
            for arm in [a for a in arms if a.proxy == kind]:
                folder = work / workload.name / arm.name.replace(":", "-")
                folder.mkdir(parents=True, exist_ok=True)
                env = None
                config = proxy_config(workload, upstreams, kind)
                if kind == "ours":
                    (policy := folder / "team-policy.yaml").write_text(team_policy(workload, arm.policy))
                    env = {"AISIA_POLICY": str(policy)}
                if arm.teams:  # the teams' keys, authenticated by team_keys.py (this folder)
                    config["general_settings"] = {"custom_auth": TEAM_KEYS_AUTH}
                    here = str(Path(__file__).resolve().parent)
                    env = {**(env or {}), "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH"))
                                                                        if p)}
                bench.progress(f"{workload.name} / {arm.name}: starting a {kind} proxy")
                proxy = Proxy(config, folder, env=env, timeout_s=180)
                proxy.start()
                try:
                    records, run = asyncio.run(run_arm(proxy, arm, workload, holder, n, seed, concurrency))
                finally:
                    proxy.stop()
                grades = run.pop("grades")
                judged = grades if "judge" in run else None  # (the judge's arm: its figures even at 0 calls)
                results[arm.name] = {**measure(records, workload, n, judged), **run,
                                     "commit": commit,
                                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
                r = results[arm.name]
                bench.progress(f"{workload.name} / {arm.name}: quality {r['quality']:.3f}, cost ${r['cost_usd']:.3f}, "
                               f"{r['requests_all']} requests, {r['errors']} errors, "
                               f"{run['unknown_requests']} unknown to the simulator, {run['wall_s']:.0f} s")
    finally:
        stop_upstreams(running)
    best = compare(results)
    return {"workload": workload.name, "description": workload.description, "conversations": n,
            "system_message": workload.system_message, "oracle_tolerance": workload.oracle_tolerance,
            "hard_groups": list(workload.hard_groups(1.0)), "frontier": workload.frontier.id,
            "deployments": [asdict(d) for d in workload.deployments], "mix": dict(workload.mix),
            "users": asdict(workload.users), **best, "arms": results}


# -- output ---------------------------------------------------------------------------------------
def _f(v, spec="{:.2f}"):
    return "-" if v is None else spec.format(v)


def table(res: dict) -> list[str]:
    rows = [[f"`{name}`", _f(a.get("quality_share")), _f(a.get("cost_share")), _f(a["quality"], "{:.3f}"),
             _f(a["cost_usd"], "{:.3f}"), _f(a.get("mixing_quality_share")), _f(a["frontier_share_hard"]),
             _f(a["frontier_share_easy"]), str(a["requests"]), str(a["errors"]), f"{a['wall_s']:.0f}"]
            for name, a in res["arms"].items()]
    return bench.md_table(["arm", "quality / always-best", "cost / always-best", "quality", "cost $",
                           "mixing at that cost", "frontier share, hard", "frontier share, easy", "requests",
                           "errors", "wall s"], rows, "---:")


def acceptance(res: dict) -> list[str]:
    """Issue 40's acceptance 1 on the two-tier workload: ours >= 0.95 of the always-best quality at
    <= 0.60 of its cost, ahead of LiteLLM's adaptive router on both."""
    ours, adaptive = res["arms"].get("ours"), res["arms"].get("litellm-adaptive")
    if res["workload"] != "two_tier" or not ours or ours.get("quality_share") is None:
        return []
    met = ours["quality_share"] >= 0.95 and ours["cost_share"] <= 0.60
    line = (f"Issue 40, acceptance 1 (`ours` >= 0.95 of the always-best quality at <= 0.60 of its cost, over the last "
            f"half of 1,500 conversations): **{'MET' if met and res['conversations'] >= 1500 else 'NOT MET'}** "
            f"({ours['quality_share']:.2f} at {ours['cost_share']:.2f}).")
    if adaptive is not None and adaptive.get("quality_share") is not None:
        # Both readings of "ahead": on quality and on cost at once, and above the mixing line of
        # the fixed arms at one's own cost (a router nearly always on the cheapest deployment
        # cannot be beaten on cost by one that sends the hard questions to the frontier).
        both = ours["quality_share"] >= adaptive["quality_share"] and ours["cost_share"] <= adaptive["cost_share"]
        above = [a["quality_share"] - a["mixing_quality_share"] for a in (ours, adaptive)]
        line += (f" Against `litellm-adaptive` ({adaptive['quality_share']:.2f} at {adaptive['cost_share']:.2f}): "
                 f"higher quality {'yes' if ours['quality_share'] > adaptive['quality_share'] else 'no'}, "
                 f"lower cost too {'yes' if both else 'no'}; above mixing at its own cost {above[0]:+.2f} "
                 f"against {above[1]:+.2f}.")
    return [line, ""]


def conditions_text(c: dict) -> str:
    """A workload's run conditions (``res["conditions"]``) in words."""
    return (f"commit `{c['commit']}`{' (uncommitted changes)' if c['dirty'] else ''}, {c['date']}, seed {c['seed']}, "
            f"{c['cpu_count']} cores shared with other jobs (load {c['load_average_1_5_15']}), Python {c['python']}, "
            f"LiteLLM {c['litellm']}, {c['concurrency']} conversations in flight, fake upstreams answering in "
            f"{UPSTREAM_LATENCY_MS:g} ms; wall time {c['wall_s']:.0f} s"
            + (f"; arms run later: {c['added']}" if c.get("added") else ""))


def title(res: dict) -> str:
    return (f"{res['workload']} ({res['conversations']} conversations"
            + ("" if res["system_message"] else ", no system message") + ")")


def markdown(report: dict) -> str:
    out = ["# Routers on simulated conversations through a real LiteLLM proxy", "",
           "<!-- Written by benchmarks/conversation_bench.py; do not edit by hand. -->", "",
           "Quality: the share of answers to a task that were right; cost: every request's tokens at the serving "
           "deployment's prices; both over the last half of the conversations and as a share of the always-best "
           "deployment's; mixing: the quality share of the best random mixture of the fixed arms at the same cost; "
           "frontier share: the most expensive deployment's share of the task turns of the hard groups (those the oracle "
           "does not send to the cheapest deployment) and of the easy ones. The verdicts stay in the benchmark: no arm "
           "posts feedback but `ours+feedback`. `ours` runs the shipped policy under a team file declaring the "
           "deployments' tiers and, since every simulated user comes through one API key (a chat front-end's), lifting "
           f"that key's bound on signals (`signals.max_signals_per_key_hour: {TRUSTED_KEY_SIGNALS_PER_HOUR}`; from commit "
           "db55070 on); it learns from the conversation signals alone. `ours+judge`: the same with `quality.judge` "
           f"naming the frontier deployment, `sample_rate: {JUDGE_SAMPLE_RATE:g}`: a simulated judge that agrees with the "
           f"truth on {GRADER_AGREEMENT:.0%} of the answers it grades (an assumption of this benchmark), its calls priced "
           "as the frontier's and counted in the arm's cost. `ours+feedback`: the same with the client posting each task "
           "answer's verdict to `/aisia/feedback` (1 or 0), every answer rated: the most a router can be told. "
           f"`ours:teams` (where shown): `ours` with the conversations spread over {TEAMS} teams' API keys (LiteLLM's "
           "`custom_auth`, benchmarks/team_keys.py), as a platform's teams would share the proxy: each key's evidence is "
           "weighed against the others' (docs/security.md#tenants).", "",
           "Quality against cost for each 1,500-conversation workload, every router beside the line of mixing the "
           "fixed arms: [conversations.png](conversations.png) (written with matplotlib).", ""]
    for res in report["workloads"]:
        u = res["users"]
        out += [f"## {title(res)}", "",
                f"{res['description']}. Mix {res['mix']}; hard groups {res['hard_groups']}; system message: "
                f"{'yes' if res['system_message'] else 'no'}; users: after a wrong answer complain {u['complain']:.0%}, "
                f"regenerate {u['regenerate']:.0%}; after a right one thank and leave {u['thank_and_leave']:.0%}, thank "
                f"and ask {u['thank_and_ask']:.0%}, ask {u['ask']:.0%}; silent users {u['silent']:.0%}; always-best: "
                f"`{res['always_best']}`; oracle tolerance {res['oracle_tolerance']:g}.", "",
                f"Conditions: {conditions_text(res['conditions'])}.", ""]
        out += table(res) + [""] + arm_notes(res) + acceptance(res)
    return "\n".join(out)


def arm_notes(res: dict) -> list[str]:
    """What the judge and the feedback arms were told, in the proxy's own counts."""
    lines = []
    judged = res["arms"].get("ours+judge")
    if judged and "judge" in judged:
        c = judged["judge"]
        outcomes = ", ".join(f"{k} {v:.0f}" for k, v in sorted(c["calls"].items()))
        agreed, disagreed = (c["agreement"].get(r, 0.0) for r in ("agreed", "disagreed"))
        lines.append(f"`ours+judge`: {judged['judge_calls_all']} answers graded over the run, "
                     f"{judged['judge_calls']} in the last half (${judged['judge_usd']:.3f} of its cost), "
                     f"${judged['judge_usd_all']:.3f} in all; the proxy's count of its judge calls: {outcomes or 'none'}, "
                     f"spend ${c['spend_usd']:.3f}; the judge and the "
                     f"conversation signals agreed on {agreed:.0f} of the {agreed + disagreed:.0f} answers both "
                     "spoke about.")
    fed = res["arms"].get("ours+feedback")
    if fed and "feedback" in fed:
        lines.append(f"`ours+feedback`: {fed['feedback']['posted']} verdicts posted to `/aisia/feedback` "
                     f"({fed['feedback']['refused']} refused).")
    return lines + [""] if lines else []


# The routers the picture marks, each with its marker (the fixed arms are the mixing line's corners).
PLOTTED = {"ours": ("o", "ours (signals)"), "ours+judge": ("D", "ours + 2 % judge"),
           "ours+feedback": ("s", "ours + feedback"), "oracle": ("*", "oracle"), "random": ("x", "random"),
           "litellm-adaptive": ("^", "LiteLLM adaptive"), "litellm-complexity": ("v", "LiteLLM complexity")}


def plot(report: dict, path: Path) -> bool:
    """Quality against cost (shares of the always-best deployment's) per 1,500-conversation
    workload: each router a marker, the fixed arms joined by the mixing line (what a random
    mixture of them reaches at each cost). False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    shown = [r for r in report["workloads"] if r["conversations"] >= FULL_CONVERSATIONS and r.get("always_best")]
    if not shown:
        return False
    cols = 3
    rows = (len(shown) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False)
    for ax, res in zip(axes.flat, shown):
        arms = res["arms"]
        fixed = sorted((a["cost_share"], a["quality_share"]) for k, a in arms.items()
                       if k.startswith("always:") and a.get("quality_share") is not None)
        hull = [(c, mixing_quality(fixed, c)) for c in [i / 100 for i in range(0, 101)]]
        ax.plot([c for c, _ in hull], [q for _, q in hull], "-", color="0.6", lw=1, label="mixing the fixed arms")
        ax.plot([c for c, _ in fixed], [q for _, q in fixed], "o", color="0.6", mfc="white")
        for k, (name, (marker, label)) in enumerate(PLOTTED.items()):
            a = arms.get(name)
            if a and a.get("quality_share") is not None:  # (a colour per router, the same in every panel)
                ax.plot(a["cost_share"], a["quality_share"], marker, color=f"C{k}", ms=8 if marker != "*" else 12,
                        label=label)
        ax.set_title(title(res).replace(" (1500 conversations", " (1,500").replace(", no system message", ", no system"),
                     fontsize=10)
        ax.set_xlim(-0.02, 1.05)
        ax.set_ylim(0.3, 1.03)
        ax.grid(alpha=0.3)
        ax.set_xlabel("cost / always-best", fontsize=9)
        ax.set_ylabel("quality / always-best", fontsize=9)
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    handles, labels = {}, {}  # every router any panel shows, once
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    handles, labels = list(handles.values()), list(handles)
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.08 if rows > 1 else 0.14, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def ordered(workloads: list[dict]) -> list[dict]:
    """Workloads in WORKLOADS' order, each with its system message before without."""
    names = list(WORKLOADS)
    return sorted(workloads, key=lambda r: (names.index(r["workload"]) if r["workload"] in names else len(names),
                                            not r["system_message"], -r["conversations"]))


def merged(old_workloads: list[dict], results: list[dict]) -> list[dict]:
    """--merge: the earlier workloads with this run's. A workload run again with its fixed arms
    replaces the old one; arms run alone join its table (an arm run again replaces its row), and
    each such later run is listed in its conditions after the earlier ones."""
    fresh = {title(r): r for r in results}
    kept = []
    for old in old_workloads:
        new = fresh.get(title(old))
        if new is not None and new["conversations"] == old["conversations"] and not any(
                a.startswith("always:") for a in new["arms"]):
            new["arms"] = {**old["arms"], **new["arms"]}
            new.update(compare(new["arms"]))
            c, before = new["conditions"], old["conditions"].get("added")
            run = f"{c['arms']} at commit {c['commit']}, {c['date']}, load {c['load_average_1_5_15']}, {c['wall_s']:.0f} s"
            new["conditions"] = {**old["conditions"], "added": f"{before}; then {run}" if before else run}
        elif new is None:
            kept.append(old)
    return kept + results


def git_commit() -> tuple[str, bool]:
    def git(*args):
        return subprocess.run(["git", *args], cwd=bench.REPO, capture_output=True, text=True).stdout.strip()
    # changes to the results files (a --merge run after another) do not make the code uncommitted
    return git("rev-parse", "--short", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no", "--", ".",
                                                         ":!benchmarks/results", ":!benchmarks/RESULTS.md"))


def main(argv=None) -> int:
    args = bench.arguments(__doc__, argv, quick=(False, f"{QUICK_CONVERSATIONS} conversations instead of "
                                                        f"{FULL_CONVERSATIONS}"),
                           workloads=("two_tier", f"comma-separated, or all ({', '.join(WORKLOADS)})"),
                           arms=(",".join(BASE_ARMS), "comma-separated arms"), conversations=int, seed=0,
                           concurrency=6, no_system_message=(False, "conversations without a system message"),
                           no_write=(False, "print only"), out=("conversations", "results file name"),
                           render_only=(False, "rewrite the Markdown from the last results/<out>.json"),
                           merge=(False, "keep the other workloads of results/<out>.json (a workload run again is "
                                         "replaced)"))
    if args.render_only:
        report = json.loads((bench.RESULTS / f"{args.out}.json").read_text())
        report["workloads"] = ordered(report["workloads"])
        bench.write_results(args.out, report, markdown(report))
        plot(report, bench.RESULTS / f"{args.out}.png")
        return 0
    names = list(WORKLOADS) if args.workloads == "all" else args.workloads.split(",")
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown} (known: {', '.join(WORKLOADS)})")
    n = args.conversations or (QUICK_CONVERSATIONS if args.quick else FULL_CONVERSATIONS)
    commit, dirty = git_commit()
    results = []
    for name in names:
        workload = WORKLOADS[name]
        if args.no_system_message:
            workload = replace(workload, system_message=False)
        t0 = time.monotonic()
        res = run_workload(workload, args.arms.split(","), n, args.seed, args.concurrency, bench.OUT / "conversations",
                           commit + ("+" if dirty else ""))
        res["conditions"] = bench.conditions(commit=commit, dirty=dirty, seed=args.seed, concurrency=args.concurrency,
                                             arms=args.arms, wall_s=round(time.monotonic() - t0, 1))
        results.append(res)
    previous = bench.RESULTS / f"{args.out}.json"
    if args.merge and previous.exists():
        results = merged(json.loads(previous.read_text())["workloads"], results)
    report = {"workloads": ordered(results)}
    md = markdown(report)
    print(md)
    if not args.no_write:
        bench.write_results(args.out, report, md)
        plot(report, bench.RESULTS / f"{args.out}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
