"""Each fast path of an alias request against its plain reading, in instructions (callgrind): the
calls a typical alias request makes (alias_path_count.py's rig, strategy ``contextual``, the
default of ``auto``) are recorded with their arguments, then each reading is run over the same
arguments, collected alone (callgrind's client requests; the loop over them measured with a
function doing nothing, and subtracted). The saving per request, against the whole proxy's alias
request (results/proxy_count.json), decides: a fast path stays at 1 % or more (issue 36).

    .venv/bin/python benchmarks/fast_paths.py [--requests 40] [--rev BEFORE]

Two configurations: the rig's one-candidate alias, and an alias over all of 16 deployments. The
package measured is the one of git revision ``--rev`` (default ``BEFORE``, the last with every twin;
``HEAD``: what is left), checked out apart; a twin whose readings it lacks is left out.

Without valgrind the script runs itself under it; results/fast_paths.{json,md}."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import bench  # first: LiteLLM kept offline, this folder importable

if os.environ.get("AISIA_TWINS_TREE"):  # the package of the revision measured, before the worktree's
    sys.path.insert(0, os.environ["AISIA_TWINS_TREE"])

import alias_path_count as rig  # noqa: E402

from aisia_plugin import bandit, contextual as cx, decision, engine, learning, outcome
from aisia_plugin.strategies import contextual as strategy

BEFORE = "f5361a2"  # before issue 36's fold of the contextual and core twins
SHARE = 0.01  # a fast path stays when it saves at least this share of the alias request


def spy(owner, name: str, sink: list, snap=lambda args, out: args):
    """Record ``snap(args, result)`` of each call of ``owner.name``; returns an undo."""
    original = owner.__dict__[name]

    def wrapper(*args, **kwargs):
        before = snap(args, None) if snap is _rng_copy else None
        out = original(*args, **kwargs)
        sink.append(before if before is not None else snap(args, out))
        return out
    setattr(owner, name, wrapper)
    return lambda: setattr(owner, name, original)


def _rng_copy(args, _out):
    rng = random.Random()
    rng.setstate(args[0].getstate())
    return rng, args[1]


def _fields(obj, n=None) -> tuple:
    return tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))[:n]


def constructions(cls, n: int):
    """``cls(a, b, ...)`` and ``cls(a=a, b=b, ...)`` over its first `n` fields, as source writes them."""
    names = [f.name for f in dataclasses.fields(cls)][:n]
    by_position = eval(f"lambda {', '.join(names)}: cls({', '.join(names)})", {"cls": cls})
    by_keyword = eval(f"lambda {', '.join(names)}: cls({', '.join(f'{x}={x}' for x in names)})", {"cls": cls})
    return by_position, by_keyword


def _spans_of(features) -> tuple:
    return (cx._raw(cx._text_of(features)),)


def _hashes_of(features) -> tuple:
    return cx._word_spans(*_spans_of(features))  # the arguments request_vector_reference passes


def _residual_plainly(models, cols, x):
    """``ContextualModels.residual``'s plain reading (tests/test_contextual.py), as lists."""
    g = models.mv.take(x.idx, axis=0)
    return (x.val @ g[:, 0, :])[cols].tolist(), (x.sq @ g[:, 1, :])[cols].tolist()


def twins() -> list[dict]:
    """name, where, the fast and the plain reading, the recorded calls' arguments (`src`: a spy on
    (owner, attribute, snap)): those of the revision measured that has both readings."""
    ctx_pos, ctx_kw = constructions(decision.RoutingContext, 12)
    arm_pos, arm_kw = constructions(bandit.ArmStats, 9)
    by_fields = lambda args, out: _fields(out)  # noqa: E731 -- the record built, by its fields
    models = cx.ContextualModels
    table = [
        ("request_vector", "contextual.py", getattr(cx, "request_vector_reference", None) and cx.request_vector,
         getattr(cx, "request_vector_reference", None), (strategy, "request_vector", None)),
        ("_word_spans (in request_vector_reference)", "contextual.py", cx._word_spans,
         getattr(cx, "_word_spans_reference", None), (strategy, "request_vector", lambda a, o: _spans_of(a[0]))),
        ("_word_hashes (in request_vector_reference)", "contextual.py", cx._word_hashes,
         getattr(cx, "_word_hashes_reference", None), (strategy, "request_vector", lambda a, o: _hashes_of(a[0]))),
        ("ContextualModels.residual", "contextual.py", getattr(models, "residual_lists", None),
         _residual_plainly, (models, "residual_lists", None)),
        ("gauss_draws", "strategies/contextual.py", getattr(strategy, "gauss_draws", None),
         getattr(strategy, "gauss_draws_reference", None), (strategy, "gauss_draws", _rng_copy)),
        ("ranking_of", "decision.py", decision.ranking_of, getattr(decision, "_ranking_plainly", None),
         (decision, "ranking_of", None)),
        ("reward", "outcome.py", outcome.reward, getattr(outcome, "_reward", None), (engine, "reward", None)),
        ("outcome_record (slots' setters)", "learning.py", learning.outcome_record, learning.OutcomeRecord,
         (engine, "outcome_record", None)),
        ("_applied (slots' setters)", "learning.py", getattr(learning, "_applied", None), learning.Applied,
         (learning, "_applied", None)),
        ("RoutingContext by position", "engine.py", ctx_pos, ctx_kw,
         (strategy.ContextualStrategy, "select", lambda a, o: _fields(a[2], 12))),
        ("ArmStats by position (bandit.update)", "bandit.py", arm_pos, arm_kw, (learning, "update", by_fields)),
    ]
    return [dict(name=n, where=w, fast=f, plain=p, src=src) for n, w, f, p, src in table
            if f and p and src[1] in src[0].__dict__]


def _nothing(*_args):
    """The loop's own cost: called with each reading's arguments."""


async def measure(a) -> None:
    """Under valgrind: record the calls of `a.requests` requests, then one dump per twin and reading."""
    router, plugin = rig.build(a.deployments, int(a.arm == "wide"), strategy="contextual")
    model = rig.ALIAS if a.arm == "alias" else "auto/wide-0"
    for _ in range(a.warmup):
        await rig.one(router, plugin, model)
    table = twins()
    undo = []
    for t in table:
        owner, name, snap = t["src"]
        t["calls"] = []
        undo.append(spy(owner, name, t["calls"], snap or (lambda args, out: args)))
    for _ in range(a.requests):
        await rig.one(router, plugin, model)
    for u in reversed(undo):
        u()
    cg = rig.Callgrind()
    cg.request(cg.START)
    for t in table:
        for reading in ("none", "fast", "plain"):
            fn = _nothing if reading == "none" else t[reading]
            calls = [_rng_copy(c, None) if t["name"] == "gauss_draws" else c for c in t["calls"]]
            cg.request(cg.TOGGLE_COLLECT)
            for c in calls:
                fn(*c)
            cg.request(cg.TOGGLE_COLLECT)
            cg.dump(f"{reading}|{len(t['calls'])}|{t['where']}|{t['name']}")
    cg.request(cg.STOP)


def counted(prefix: str) -> dict:
    """(twin, where) -> {reading: (instructions, calls)} from the dumps `prefix`.N."""
    out = {}
    for f in Path(prefix).parent.glob(Path(prefix).name + ".*"):
        text = f.read_text(errors="replace")
        trigger = re.search(r"^desc: Trigger: Client Request: (\w+)\|(\d+)\|([^|]*)\|(.*)$", text, re.M)
        total = re.search(r"^(?:totals|summary): (\d+)", text, re.M)
        if trigger and total:
            out.setdefault((trigger[4], trigger[3]), {})[trigger[1]] = (int(total[1]), int(trigger[2]))
    return out


# The count before and after issue 36's fold (acceptance 2): twins are a fast path beside a plain
# reading held equal by a test; "equivalence-only" test files hold nothing else.
COUNTS = """## Before and after

| | issue 36 filed | f5361a2 (before this fold) | after |
|---|---:|---:|---:|
| twins in the core | 8 | 11 (the table) | 2: `ContextualModels.residual`'s float32 product, `RoutingContext` by position (engine.py) |
| twins in litellm/ (caches with a plain reading in a test; not measured here) | | 2 | 2 |
| equivalence-only test files | 3 | 1 (`test_core_fast_paths.py`) | 1 (`test_core_fast_paths.py`: `RoutingContext`'s field order) |
| equivalence tests | | 13 | 4 |

Folding `residual` changes the contextual scores from their 7th digit (float32 against float64
rounding; the explain golden fixture differs in 44 of 330 cases, no choice): it waits for the next
change of those scores. `RoutingContext` by position folds back with the engine's decision stages.
"""

CONFIGS = (("alias", 1), ("wide", 16))  # one candidate; the shipped ``auto``'s shape over 16 deployments


def report(a, arm: str, deployments: int, counts: dict) -> dict:
    whole = json.loads((bench.RESULTS / "proxy_count.json").read_text())["results"]
    request = whole[str(deployments)][arm]["per_request"]
    rows = []
    for (name, where), got in counts.items():
        none, calls = got["none"]
        fast, plain = got["fast"][0] - none, got["plain"][0] - none
        saving = (plain - fast) / a.requests
        rows.append({"twin": name, "where": where, "calls_per_request": calls / a.requests,
                     "fast_per_request": fast / a.requests, "plain_per_request": plain / a.requests,
                     "saving_per_request": saving, "share_of_alias_request": saving / request,
                     "verdict": "stays" if saving / request >= SHARE else "folds back"})
    rows.sort(key=lambda x: -x["saving_per_request"])
    return {"arm": arm, "deployments": deployments, "requests": a.requests, "strategy": "contextual",
            "alias_request_instructions": request, "rows": rows}


def markdown(r: dict) -> str:
    lines = [f"## {r['arm']} arm, {r['deployments']} deployment(s)", "",
             f"The calls of {r['requests']} requests of the rig (strategy {r['strategy']}) replayed through each "
             f"reading; the request costs {r['alias_request_instructions'] / 1e6:.2f} M instructions in the whole "
             f"proxy (proxy_count.json), 1 % = {r['alias_request_instructions'] / 100e3:.0f}k.", "",
             "| twin | where | calls/request | fast | plain | saving | share | verdict |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for x in r["rows"]:
        lines.append(f"| {x['twin']} | {x['where']} | {x['calls_per_request']:g} | {x['fast_per_request']:,.0f} | "
                     f"{x['plain_per_request']:,.0f} | {x['saving_per_request']:,.0f} | "
                     f"{100 * x['share_of_alias_request']:.3f} % | {x['verdict']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = bench.arguments(__doc__, argv, requests=(40, "recorded requests"), warmup=(30, "warm-up requests"),
                        rev=(BEFORE, "the git revision whose package is measured"),
                        arm=("", "(internal, under valgrind) alias or wide"), deployments=(1, "(internal)"))
    if rig.Callgrind().request(rig.Callgrind.RUNNING):
        asyncio.run(measure(a))
        return 0
    tree = Path(tempfile.mkdtemp(prefix="aisia-twins-"))
    subprocess.run(f"git -C {bench.REPO} archive {a.rev} aisia_plugin schemas policies | tar -x -C {tree}",
                   shell=True, check=True)
    env = {**os.environ, "AISIA_TWINS_TREE": str(tree)}
    runs = []
    for arm, deployments in CONFIGS:
        prefix = str(tree / f"cg-{arm}.out")
        subprocess.run(["valgrind", "-q", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
                        f"--callgrind-out-file={prefix}", sys.executable, __file__, *argv, "--arm", arm,
                        "--deployments", str(deployments)], check=True, env=env)
        runs.append(report(a, arm, deployments, counted(prefix)))
        print(markdown(runs[-1]))
    md = f"# Fast paths against their plain readings (the package of {a.rev})\n\n"
    md += "\n".join(markdown(r) for r in runs) + "\n" + COUNTS
    bench.write_results("fast_paths", {"revision": a.rev, "share_to_stay": SHARE, "runs": runs}, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
