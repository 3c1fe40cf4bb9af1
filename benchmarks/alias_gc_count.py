"""What alias requests leave to Python's garbage collector, counted deterministically (no wall
clock): the tracked objects an explain-log entry keeps alive, and the objects that reach the oldest
generation per request. A LiteLLM Router in this process with the plugin, each request driven as the
proxy drives it (``alias_path_count.one``: pre-call hook, ``Router.acompletion`` with a mocked
answer, headers hook, LiteLLM's logging worker drained), the benchmark's one-candidate alias
``auto/bench`` (its strategy replaced with ``--strategy``).

    .venv/bin/python benchmarks/alias_gc_count.py --requests 600 [--strategy thompson] [--kinds]

A request here allocates less than in a proxy (no HTTP, no FastAPI): the young generation's
threshold is lowered (``--threshold``, CPython's default 700) so that generation-1 collections run
about every 100 requests, as they do in a proxy (~125). Three figures, after ``--warmup`` requests
(more than the explain log holds: it is full):

- **per explain entry**: the tracked objects freed when the explain log is emptied (collected
  before and after, so that tuples and dicts of atoms the collector untracks do not count), divided
  by the entries it held; ``--kinds`` lists them by kind;
- **promoted to the oldest generation per request**: over ``--requests`` requests, the survivors
  of each generation-1 collection (a ``gc.callbacks`` hook reads ``len(gc.get_objects(2))`` before
  and after it), with the collections of each generation;
- **new and alive in the oldest generation**: ``gc.collect()``, the ids in it, ``--requests`` more
  requests, then the objects of ``gc.get_objects(2)`` not among those ids (``--kinds``: by kind)."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections import Counter

import bench  # first: LiteLLM kept offline, this folder importable
from alias_path_count import build, one
from proxy_rig import ALIAS, PLAIN


def kind(o) -> str:
    """A short description of an object: its type, and for a container what it holds."""
    t = type(o)
    name = t.__qualname__
    if t in (list, tuple, set, frozenset):
        inner = sorted({type(x).__qualname__ for x in o})
        shape = ",".join(type(x).__qualname__ for x in o) if t is tuple and len(o) <= 6 else "|".join(inner)
        return f"{name}[{shape}] len {len(o) if len(o) < 3 else '3+'}"
    if t is dict:
        keys = list(o)[:8]
        if all(type(k) is str for k in keys):
            return f"dict{{{','.join(keys)}}}"
        return f"dict of {len(o)}"
    if callable(o) and hasattr(o, "__qualname__"):
        return f"{name} {o.__qualname__}"
    return name


def collected() -> None:
    # Twice: a collection stops tracking a tuple whose items it has already found untracked (it
    # walks its list in order), so a tuple of tuples of atoms may take two.
    gc.collect()
    gc.collect()


async def freed_per_entry(runtime, kinds: bool) -> None:
    collected()
    before = {id(o): kind(o) if kinds else None for o in gc.get_objects()}
    entries = len(runtime.explain)
    runtime.explain.clear()
    collected()
    after = {id(o) for o in gc.get_objects()}
    freed = [k for i, k in before.items() if i not in after]
    print(f"per explain entry: {len(freed) / entries:.2f} tracked objects freed with it ({len(freed)} for {entries})")
    if kinds:
        for k, n in Counter(freed).most_common(30):
            print(f"  {n / entries:7.2f}  {k}")


async def run(arm: str, strategy: str, requests: int, warmup: int, kinds: bool, threshold: int) -> None:
    gc.set_threshold(threshold, 10, 10)
    router, plugin = build(strategy=strategy, plugin_loaded=arm != "litellm")
    model = ALIAS if arm == "alias" else PLAIN
    for _ in range(warmup):
        await one(router, plugin, model)

    # Promotions: the survivors of each generation-1 collection (they enter the oldest one).
    counts, promoted, sized = [0, 0, 0], [0], [0]

    def watch(phase, info):
        gen = info["generation"]
        if phase == "start":
            counts[gen] += 1
            if gen == 1:
                sized[0] = len(gc.get_objects(2))
        elif gen == 1:
            promoted[0] += len(gc.get_objects(2)) - sized[0]

    gc.collect()
    old = {id(o) for o in gc.get_objects(2)}
    gc.callbacks.append(watch)
    try:
        for _ in range(requests):
            await one(router, plugin, model)
    finally:
        gc.callbacks.remove(watch)
    new = [o for o in gc.get_objects(2) if id(o) not in old]
    print(f"arm {arm}, strategy {strategy}, {requests} requests after {warmup}, threshold {threshold}: collections gen0/gen1/gen2 "
          f"{counts[0]}/{counts[1]}/{counts[2]}; promoted to gen2 {promoted[0] / requests:.2f} per request; "
          f"new and alive in gen2 {len(new)} ({len(new) / requests:.2f} per request); "
          f"tracked heap {len(gc.get_objects())}")
    if kinds:
        for k, n in Counter(kind(o) for o in new).most_common(25):
            print(f"  {n:6d}  {k}")
    del new
    if plugin is not None and plugin.runtime.explain:
        await freed_per_entry(plugin.runtime, kinds)


def main(argv=None) -> int:
    a = bench.arguments(__doc__, argv, arm=("alias", "alias, plain or litellm (a Router without the plugin)"),
                        strategy=("ucb1", "the alias's strategy"), requests=600, warmup=300, kinds=False,
                        threshold=(100, "the young generation's threshold (gc.set_threshold)"))
    asyncio.run(run(a.arm, a.strategy, a.requests, a.warmup, a.kinds, a.threshold))
    return 0


if __name__ == "__main__":
    sys.exit(main())
