"""Linear time on hostile inputs: the cost of one routing decision as the request grows (prompt
bytes, message count, tool-list size, NUL bytes, invalid Unicode, nesting), so that a megabyte
prompt or tens of thousands of messages cost time in proportion to their size, up to the scan cap
(domains.max_scan_chars), and never more. Each figure is the median of ``--repeats`` decisions of
a fresh request object (the engine warm). Asserts nothing.

    .venv/bin/python benchmarks/hostile_inputs.py [--repeats 5]

Writes benchmarks/results/hostile_inputs.json and .md."""

from __future__ import annotations

import random
import statistics
import sys
import time

import bench

from aisia_plugin.decision import Deployment
from aisia_plugin.engine import Engine
from aisia_plugin.policy import load_policy

POOL = [Deployment(id=f"d-{i}", model_name=f"m{i}", model=f"p{i}/model-{i}", provider=f"p{i}",
                   input_cost_per_1m=0.5 + i, output_cost_per_1m=1.0 + i) for i in range(16)]


def cases():
    word = "write a python function that parses json and explain the algorithm step by step "
    for size in (1_000, 16_000, 256_000, 1_000_000, 4_000_000):
        yield "prompt bytes", size, [{"role": "user", "content": (word * (size // len(word) + 1))[:size]}], None
    for n in (10, 1_000, 10_000, 100_000):
        yield "messages", n, [{"role": "user" if i % 2 else "assistant", "content": f"turn {i} about code"}
                              for i in range(n)], None
    for n in (10, 1_000, 10_000, 50_000):
        tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "does a thing", "parameters": {
            "type": "object", "properties": {"x": {"type": "string"}}}}} for i in range(n)]
        yield "tools", n, [{"role": "user", "content": "call a tool"}], tools
    for size in (1_000, 1_000_000):
        yield "NUL bytes", size, [{"role": "user", "content": "\x00" * size}], None
        yield "invalid unicode", size, [{"role": "user", "content": "\udcff" * size}], None
    for depth in (10, 1_000, 50_000):
        nested: object = "deep"
        for _ in range(depth):
            nested = [nested]
        yield "nesting depth", depth, [{"role": "user", "content": nested}], None


def main(argv=None) -> int:
    args = bench.arguments(__doc__, argv, repeats=5)
    policy = load_policy()
    engine = Engine(policy, rng=random.Random(0))
    engine.decide("auto", [{"role": "user", "content": "warm up"}], POOL)
    rows = []
    for kind, size, messages, tools in cases():
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            engine.decide("auto", messages, POOL, tools=tools)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        rows.append({"input": kind, "size": size, "median_ms": med * 1e3, "us_per_unit": med * 1e6 / size})
        print(f"{kind:<16} {size:>10} {med * 1e3:>10.3f} ms {med * 1e6 / size:>12.4f} us per unit", flush=True)
    conditions = bench.conditions(repeats=args.repeats, pool=len(POOL), alias="auto",
                                  max_scan_chars=policy.domains.max_scan_chars)
    md = "\n".join(["# Decision cost on hostile inputs (`benchmarks/hostile_inputs.py`)", "", f"Conditions: {conditions}", "",
                    *bench.md_table(["input", "size", "median ms", "us per unit"], [
                        [r["input"], r["size"], f"{r['median_ms']:.3f}", f"{r['us_per_unit']:.4f}"] for r in rows], "---:")])
    bench.write_results("hostile_inputs", {"conditions": conditions, "rows": rows}, md + "\n", indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
