"""Instructions per decision of each built-in strategy, deterministic: an engine over three
deployments with learned state (one alias per strategy, tests/test_explain_retained.py's policy),
each alias's ``Engine.decide`` collected alone under callgrind (the explanation not read, as on
the request path), one dump per alias.

    valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no --callgrind-out-file=dc.out \\
        .venv/bin/python benchmarks/decide_count.py --decisions 200
    grep -H -e '^desc: Trigger' -e '^totals' dc.out.*

Each dump's total divided by ``--decisions`` is that strategy's decision in instructions, the
collection switch included (the same in every dump: compare dumps, or before and after)."""

from __future__ import annotations

import random
import sys
import tempfile
from pathlib import Path

import bench  # first: this folder and the repository importable
from alias_path_count import Callgrind

sys.path.insert(0, str(bench.TESTS))
from test_explain_retained import POLICY, PROMPTS  # noqa: E402

from aisia_plugin.decision import Deployment  # noqa: E402
from aisia_plugin.engine import Engine  # noqa: E402
from aisia_plugin.outcome import Outcome  # noqa: E402
from aisia_plugin.policy.loader import load_policy_with_locations  # noqa: E402

DEPLOYMENTS = [Deployment(id=f"m-{c}", model_name=f"m-{c}", model=f"openai/model-{c}", provider=p,
                          input_cost_per_1m=cost, output_cost_per_1m=4 * cost)
               for c, p, cost in (("a", "openai", 2.5), ("b", "anthropic", 0.25), ("c", "groq", 0.6))]


def main(argv=None) -> int:
    a = bench.arguments(__doc__, argv, decisions=200)
    work = Path(tempfile.mkdtemp(prefix="aisia-decide-"))
    (work / "policy.yaml").write_text(POLICY)
    policy = load_policy_with_locations([work / "policy.yaml"]).policy
    engine = Engine(policy, clock=lambda: 1000.0, rng=random.Random(5))
    aliases = [name for name in policy.aliases if not name.endswith("-eps") and name != "x/budget"]
    messages = [[{"role": "user", "content": p}] for p in PROMPTS]
    for k in range(300):  # learned state: every deployment tried, outcomes of every kind
        for alias in aliases:
            d = engine.decide(alias, messages[k % len(messages)], DEPLOYMENTS, reserve=False)
            ok = k % 7 != 0
            engine.record(d, Outcome(d.deployment_id, ok, latency_s=0.2 + 0.1 * (k % 5),
                                     status_code=200 if ok else 500, quality=0.5 + 0.1 * (k % 4) if ok else None))
    feats = [engine.features(m) for m in messages]
    cg = Callgrind()
    cg.request(cg.START)
    for alias in aliases:
        decide = engine.decide
        cg.request(cg.TOGGLE_COLLECT)
        for k in range(a.decisions):
            decide(alias, messages[k % 3], DEPLOYMENTS, features=feats[k % 3], reserve=False)
        cg.request(cg.TOGGLE_COLLECT)
        cg.dump(f"{alias} x{a.decisions}")
    cg.request(cg.STOP)
    return 0


if __name__ == "__main__":
    sys.exit(main())
