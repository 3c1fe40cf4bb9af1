"""The conversation benchmark's learning path in one process, for many seeds (issue 40).

    .venv/bin/python benchmarks/conversations_offline.py [--workloads two_tier,three_tier] [--seeds 6]
                                                         [--conversations 1500] [--set PATH=VALUE ...] [--no-write]

What the proxy does for an alias request, without the proxy: ``Engine.decide`` on the messages
the simulated client sends, ``Engine.record`` of the success, and the proxy's own conversation
steps (``litellm.conversations.Conversations``: turns stored, the next turn's signals attributed
and recorded) over a memory store, one conversation turn after another, six conversations in
flight. The truth stays in ``conversations.TruthRegistry`` as in ``conversation_bench.py``: the
router reads the messages and nothing else. Cost: the serving deployment's prices over the
messages' and the answer's characters / 4 (the proxy benchmark reads the fake upstream's usage).

Why it exists: a proxy run of 1,500 conversations takes minutes and one seed; this takes seconds,
so a change can be judged on several seeds (their spread is printed) before the proxy run that
the acceptance reads (``conversation_bench.py``). ``--set`` lays a policy value over the shipped
ones (``quality.prior.strength=10``, ``aliases.auto.contextual.quality_tolerance=0.1``).

Writes benchmarks/results/conversations_offline.{json,md}."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import bench  # first: LiteLLM offline, the repository importable
import yaml
from conversation_bench import TurnRecord, compare, measure, team_policy
from conversations import WORKLOADS, Conversation, QuestionBank, TruthRegistry, Workload, answer_text

from aisia_plugin.decision import Deployment
from aisia_plugin.engine import Engine
from aisia_plugin.litellm.conversations import Conversations
from aisia_plugin.outcome import Outcome
from aisia_plugin.policy.loader import default_policy_paths, load_policy
from aisia_plugin.state.memory import MemoryState

IN_FLIGHT = 6
RESULTS = Path(__file__).resolve().parent / "results"


def policy_for(workload: Workload, settings: dict, folder: Path):
    """The shipped policy under the bench's team file (the deployments' tiers), `settings` over it."""
    team = yaml.safe_load(team_policy(workload))
    for path, value in settings.items():
        node = team
        *parents, last = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    team["overrides"] = True  # a setting of the shipped files may be set again here
    (file := folder / f"{workload.name}.yaml").write_text(yaml.safe_dump(team))
    return load_policy(default_policy_paths() + [file])


def run(workload: Workload, arm: str, n: int, seed: int, policy) -> list[TurnRecord]:
    """One arm's turns: `arm` is ``ours`` or ``always:<id>``."""
    deps = [Deployment(d.id, d.id, f"openai/{d.id}", "openai", tier=d.tier, input_cost_per_1m=d.input_per_1m,
                       output_cost_per_1m=d.output_per_1m) for d in workload.deployments]
    store = MemoryState()
    engine = Engine(policy, store=store, rng=random.Random(seed))
    steps = Conversations(SimpleNamespace(policy=policy, store=store, engine=engine))
    registry, bank, ids = TruthRegistry(workload, seed, n), QuestionBank(), itertools.count()
    waiting = [Conversation(i, workload, bank, seed, n) for i in range(n)][::-1]
    records: list[TurnRecord] = []

    async def turns():
        talking: list[Conversation] = []
        while waiting or talking:
            while waiting and len(talking) < IN_FLIGHT:
                talking.append(waiting.pop())
            still = []
            for conv in talking:
                turn = conv.next_turn()
                if turn is None:
                    continue
                messages = turn.request_messages()
                decision = None
                if arm == "ours":  # (a fixed arm learns nothing: no conversation steps)
                    call = SimpleNamespace(key="bench", alias="auto", conversation=None, turn_noted=False,
                                           request_id=f"r{next(ids)}")
                    steps.opened(call, {"messages": messages}, None)
                    await steps.drain()
                    decision = engine.decide("auto", messages, deps)
                served = decision.deployment_id if decision else arm.split(":", 1)[1]
                correct = registry.right(served, turn)
                text = answer_text(served, turn, seed)
                pt, ct = sum(len(m["content"]) for m in messages) // 4, len(text) // 4
                cost = workload.deployment(served).cost_usd(pt, ct)
                if decision is not None:
                    engine.record(decision, Outcome(served, True, latency_s=0.5, cost_usd=cost))
                    reply = SimpleNamespace(choices=[SimpleNamespace(
                        message=SimpleNamespace(content=text, tool_calls=None), finish_reason="stop")])
                    steps.answered(call, {"messages": messages}, reply, served, decision)
                    await steps.drain()
                records.append(TurnRecord(conv.index, turn.number, turn.kind, turn.task and turn.task.group,
                                          turn.attempt, served, correct, pt, ct, cost))
                conv.answered(text, correct)
                still.append(conv)
            talking = still

    asyncio.run(turns())
    return records


def share(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="two_tier,three_tier,code_specialist,degrading,silent_users")
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--conversations", type=int, default=1500)
    ap.add_argument("--set", action="append", default=[], metavar="PATH=VALUE")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    settings = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    out = {"conditions": bench.conditions(), "conversations": args.conversations, "seeds": args.seeds,
           "settings": settings, "workloads": {}}
    lines = ["# Simulated conversations through the proxy's learning path, in one process", "",
             "<!-- Written by benchmarks/conversations_offline.py; do not edit by hand. -->", "",
             f"{args.conversations} conversations per run, seeds 0-{args.seeds - 1}; quality and cost over the last "
             "half, as shares of the always-best deployment's (its own run with the same seed); settings over the "
             f"shipped policy: {settings or 'none'}. The figures of record are the proxy's "
             "(conversations.md); these judge a change on several seeds.", "",
             "| workload | quality / always-best | cost / always-best | frontier share hard / easy | "
             "per seed (quality/cost) | wall s |", "|---|---:|---:|---:|---|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.workloads.split(","):
            workload, t0, runs = WORKLOADS[name], time.monotonic(), []
            policy = policy_for(workload, settings, Path(tmp))
            for seed in range(args.seeds):
                arms = {a: measure(run(workload, a, args.conversations, seed, policy), workload, args.conversations)
                        for a in ["ours"] + [f"always:{d.id}" for d in workload.deployments]}
                compare(arms)
                runs.append(arms["ours"])
                bench.progress(f"{name} seed {seed}: ours {arms['ours']['quality_share']:.3f} of the quality at "
                               f"{arms['ours']['cost_share']:.3f} of the cost")
            # (no easy group on a workload whose every group turned hard: degrading's second half)
            mean = {k: round(statistics.mean(vals), 3) if (vals := [r[k] for r in runs if r[k] is not None]) else None
                    for k in ("quality_share", "cost_share", "frontier_share_hard", "frontier_share_easy")}
            out["workloads"][name] = {"mean": mean, "runs": runs, "wall_s": round(time.monotonic() - t0, 1)}
            per_seed = " ".join(f"{r['quality_share']:.3f}/{r['cost_share']:.3f}" for r in runs)
            lines.append(f"| {name} | {mean['quality_share']:.3f} | {mean['cost_share']:.3f} | "
                         f"{share(mean['frontier_share_hard'])} / {share(mean['frontier_share_easy'])} | {per_seed} | "
                         f"{out['workloads'][name]['wall_s']:.0f} |")
    print("\n".join(lines))
    if not args.no_write:
        (RESULTS / "conversations_offline.json").write_text(json.dumps(out, indent=1) + "\n")
        (RESULTS / "conversations_offline.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
