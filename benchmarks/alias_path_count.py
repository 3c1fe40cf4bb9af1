"""The alias path's cost per request in deterministic terms (no wall clock): a LiteLLM Router in
this process with the plugin as its callback (proxy_rig.py's one-candidate alias ``auto/bench``, its
strategy ``--strategy``), each request driven as the proxy drives it (pre-call hook,
``Router.acompletion`` with a mocked answer, headers hook, LiteLLM's logging worker drained); the
arms and the model list: ``--help`` and benchmarks/README.md.

    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python \
        benchmarks/alias_path_count.py --arm alias --requests 200

Twice with different ``--requests``: the difference of the totals over that of the counts is the
per-request instructions (start-up cancels out); with ``--instr-atstart=no`` only the measured
requests are instrumented (a client request switches it). ``--cprofile``: call counts per request, the totals first.

``--collect module:Qualname`` (repeatable): each function's inclusive instructions per request,
under ``valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no``: one pass of the
requests per function, collected only inside it (outermost entry to exit, awaits included: the
hooks do not suspend on the memory store), dumped under its name (``--callgrind-out-file=F``: F.1,
F.2...; ``-`` the whole requests, ``wrapper`` an empty function: the switch's own cost, to subtract
once per outermost call, printed per pass). Collection is per thread: the event loop's (the
hooks'), not LiteLLM's thread-pool work, which the totals above include.

    valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no --callgrind-out-file=cg.out \
        .venv/bin/python benchmarks/alias_path_count.py --requests 100 \
        --collect aisia_plugin.engine:Engine.decide --collect wrapper
    grep -H -e '^desc: Trigger' -e '^totals' cg.out.*

``--gc`` (``gc_counts``): what the requests leave to Python's garbage collector, counted.

    .venv/bin/python benchmarks/alias_path_count.py --gc --requests 600 [--strategy thompson] [--kinds]"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import gc
import importlib
import inspect
import mmap
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

import bench  # first: LiteLLM kept offline, this folder importable
import litellm
from proxy_rig import ALIAS, PLAIN, POLICY, body

from aisia_plugin.demo.proxy import deployment
from aisia_plugin.litellm.callback import AisiaPlugin
from aisia_plugin.policy.loader import load_policy_with_locations

os.environ.setdefault("AISIA_SYNC_AFTER", "0")


class Key:
    token = "hashed-key"
    api_key = None


def _deployment(name: str, id_: str) -> dict:
    # Priced (LiteLLM computes a cost), on a port nobody answers: every answer is mocked.
    return deployment(name, "http://127.0.0.1:9/v1", litellm_params={"model": "openai/bench", "api_key": "sk-x"},
                      id=id_, input_cost_per_token=1e-7, output_cost_per_token=1e-7)


def build(deployments: int = 1, wide_aliases: int = 0, plugin_loaded: bool = True, strategy: str = "ucb1",
          one_group: bool = False):
    """The Router (the plain model and `deployments - 1` fillers, each its own model name, or with
    `one_group` all of them under the plain model's name) and the plugin (None without it); the
    policy: the benchmark's alias and `wide_aliases` aliases over every deployment, each with the
    strategy `strategy`."""
    model_list = [_deployment(PLAIN, "bench-1")] + [_deployment(PLAIN if one_group else f"bench-filler-{i}",
                                                                f"filler-{i}") for i in range(1, deployments)]
    router = litellm.Router(model_list=model_list, routing_strategy="simple-shuffle")
    if not plugin_loaded:
        return router, None
    work = Path(tempfile.mkdtemp(prefix="aisia-count-"))
    wide = "".join(f"  auto/wide-{i}:\n    description: Every deployment.\n    strategy: ucb1\n"
                   for i in range(wide_aliases))
    (work / "policy.yaml").write_text((POLICY + wide).replace("strategy: ucb1", f"strategy: {strategy}"))
    plugin = AisiaPlugin(load_policy_with_locations([work / "policy.yaml"]))
    plugin.boot()
    plugin.ensure_groups(router)
    litellm.callbacks = [plugin]
    return router, plugin


ANSWER = "one two three four five six seven eight"  # every request's mocked answer (but a second turn's)
SECOND_ANSWER = "nine ten eleven twelve thirteen fourteen fifteen sixteen"  # not a repeat of the first
FOLLOW_UP = "Thanks, that works."


def conversation_body(model: str, conversation: int, second: bool) -> dict:
    """--history: conversation number `conversation`'s first turn (its own question), or its second
    turn: the question, the first turn's answer, a follow-up."""
    data = body(model)
    first = {"role": "user", "content": f"{data['messages'][0]['content']} ({conversation})"}
    followed = [{"role": "assistant", "content": ANSWER}, {"role": "user", "content": FOLLOW_UP}] if second else []
    data["messages"] = [first, *followed]
    return data


class Conversations:
    """--history: each request is the second turn of a conversation of its own whose first turn
    (one stored answer) was answered beforehand, outside the measured requests (``first_turns``)."""

    def __init__(self):
        self.started = self.judged = 0

    async def first_turns(self, router, plugin, model: str, n: int) -> None:
        for _ in range(n):
            self.started += 1
            await one(router, plugin, model, conversation_body(model, self.started, False))

    def next_body(self, model: str) -> dict:
        self.judged += 1
        return conversation_body(model, self.judged, True)


async def one(router, plugin, model: str, data=None):
    data = body(model) if data is None else data
    answer = SECOND_ANSWER if len(data["messages"]) > 1 else ANSWER
    if plugin is not None:
        data = await plugin.async_pre_call_hook(Key(), None, data, "acompletion")
    resp = await router.acompletion(**data, mock_response=answer)
    if plugin is not None:
        await plugin.async_post_call_response_headers_hook(data, Key(), resp)
    for _ in range(20):  # LiteLLM's logging worker and the plugin's after-response steps
        await asyncio.sleep(0)
    return resp


class Callgrind:
    """Valgrind's client requests, made from Python: its magic instruction sequence (valgrind.h,
    amd64), written into an executable page and called through ctypes. Outside valgrind the
    sequence does nothing and returns 0."""

    RUNNING = 0x1001
    TOGGLE_COLLECT, DUMP_STATS_AT, START, STOP = 0x43540002, 0x43540003, 0x43540004, 0x43540005  # callgrind.h

    def __init__(self):
        code = bytes.fromhex(
            "4889f8"  # mov rax, rdi: the request's block of six words
            "31d2"  # xor edx, edx: the answer when not under valgrind
            "48c1c703" "48c1c70d" "48c1c73d" "48c1c733"  # rol rdi by 3, 13, 61, 51 (a no-op: 128 bits)
            "4887db"  # xchg rbx, rbx: the request
            "4889d0" "c3")  # mov rax, rdx; ret
        self._page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        self._page.write(code)
        self._call = ctypes.CFUNCTYPE(ctypes.c_ulong, ctypes.c_void_p)(
            ctypes.addressof(ctypes.c_char.from_buffer(self._page)))
        self._block = (ctypes.c_ulong * 6)()
        self._block_address = ctypes.addressof(self._block)
        self._names = []  # the dumps' names, kept alive while callgrind reads them

    def request(self, code: int, arg: int = 0) -> int:
        self._block[0], self._block[1] = code, arg
        return self._call(self._block_address)

    def dump(self, name: str) -> None:
        buf = ctypes.create_string_buffer(name.encode())
        self._names.append(buf)
        self.request(self.DUMP_STATS_AT, ctypes.addressof(buf))


def collecting(cg: Callgrind, target: str, entries: list):
    """Wrap `target` (module:Qualname) so that callgrind collects only inside it, counting its
    outermost calls in ``entries[0]``; returns an undo."""
    module, _, qual = target.partition(":")
    owner = importlib.import_module(module)
    *path, name = qual.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    fn = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
    depth = [0]
    toggle, code = cg.request, cg.TOGGLE_COLLECT

    def enter():
        depth[0] += 1
        if depth[0] == 1:
            entries[0] += 1
            toggle(code)

    def leave():
        depth[0] -= 1
        if not depth[0]:
            toggle(code)

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def wrapper(*args, **kwargs):
            enter()
            try:
                return await fn(*args, **kwargs)
            finally:
                leave()
    else:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            enter()
            try:
                return fn(*args, **kwargs)
            finally:
                leave()
    wrapped = type(original)(wrapper) if isinstance(original, (staticmethod, classmethod)) else wrapper
    setattr(owner, name, wrapped)
    return lambda: setattr(owner, name, original)


def _nothing() -> None:
    """The ``wrapper`` target of --collect: an empty function called once per request."""


async def run(a) -> None:
    arm, requests, deployments = a.arm, a.requests, a.deployments
    if a.gc:  # before the Router and the plugin are built, as their allocations run under it
        gc.set_threshold(a.threshold, 10, 10)
    router, plugin = build(deployments, max(a.wide_aliases, int(arm == "wide")), plugin_loaded=arm not in ("litellm", "group"),
                           strategy=a.strategy, one_group=arm == "group")
    model = {"alias": ALIAS, "wide": "auto/wide-0", "auto": "auto"}.get(arm, PLAIN)
    talks = Conversations() if a.history else None
    if talks is not None:
        await talks.first_turns(router, plugin, model, a.warmup)
    for _ in range(a.warmup):
        await one(router, plugin, model, talks.next_body(model) if talks else None)
    if a.gc:
        await gc_counts(a, router, plugin, model)
        return
    if a.collect:
        await collect_each(router, plugin, model, requests, a.collect, talks)
        return
    if talks is not None:
        await talks.first_turns(router, plugin, model, requests)
    if a.cprofile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
    cg = Callgrind()  # instrumentation on around the measured requests (--instr-atstart=no)
    cg.request(cg.START)
    for _ in range(requests):
        await one(router, plugin, model, talks.next_body(model) if talks else None)
    cg.request(cg.STOP)
    if a.cprofile:
        prof.disable()
        table = {bench.function_name(k): v for k, v in bench.per_call(pstats.Stats(prof), requests).items()}
        print(f"totals: arm {arm}, {deployments} deployments, {len(router.routing_groups)} routing groups, "
              f"{len(router.get_model_list() or ())} rows in get_model_list(); calls per request: "
              f"{sum(v[0] for v in table.values()):.1f} in all, "
              f"{sum(v[0] for k, v in table.items() if 'litellm/router.py' in k):.1f} in litellm/router.py, "
              f"{sum(v[0] for k, v in table.items() if 'aisia_plugin' in k):.1f} in aisia_plugin")
        rows = [(*v, k) for k, v in table.items() if "aisia_plugin" in k or "router.py" in k or "routing_groups" in k]
        print("calls/req  cum us/req  own us/req  function (aisia_plugin and litellm's router)")
        for calls, own, cum, name in sorted(rows, key=lambda r: -r[1])[:400]:
            print(f"{calls:7.1f} {cum:9.1f} {own:9.1f}  {name}")
    if plugin is not None:
        print("learned:", plugin.runtime.store.stats().get("bench-1", {}).get("count"), file=sys.stderr)


async def collect_each(router, plugin, model: str, requests: int, targets, talks=None) -> None:
    """One pass of `requests` per target, collected inside it only, dumped under its name (with
    --history, each pass's first turns answered before it, uncollected)."""
    cg = Callgrind()
    if not cg.request(cg.RUNNING):
        print("--collect: not under valgrind; the passes run uncounted", file=sys.stderr)
    cg.request(cg.START)
    for target in targets:
        if talks is not None:
            await talks.first_turns(router, plugin, model, requests)
        if target == "-":
            cg.request(cg.TOGGLE_COLLECT)
            for _ in range(requests):
                await one(router, plugin, model, talks.next_body(model) if talks else None)
            cg.request(cg.TOGGLE_COLLECT)
        else:
            entries = [0]
            undo = collecting(cg, f"{__name__}:_nothing" if target == "wrapper" else target, entries)
            call_nothing = globals()["_nothing"] if target == "wrapper" else None
            for _ in range(requests):
                await one(router, plugin, model, talks.next_body(model) if talks else None)
                if call_nothing is not None:
                    call_nothing()
            undo()
            print(f"collected: {target}: {entries[0] / requests:g} outermost calls per request")
        cg.dump(f"{target} x{requests}")
    cg.request(cg.STOP)


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


def freed_per_entry(runtime, kinds: bool) -> None:
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


async def gc_counts(a, router, plugin, model: str) -> None:
    """--gc. A request here allocates less than in a proxy (no HTTP, no FastAPI): the young
    generation's threshold is lowered (``--threshold``, CPython's 700) so that generation-1
    collections run about every 100 requests, as in a proxy (~125). After the warm-up (longer than
    the explain log: it is full), over ``--requests`` requests:

    - promoted to the oldest generation per request: the survivors of each generation-1 collection
      (a ``gc.callbacks`` hook reads ``len(gc.get_objects(2))`` before and after it), with the
      collections of each generation;
    - new and alive in the oldest generation: ``gc.collect()``, the ids in it, the requests, then
      the objects of ``gc.get_objects(2)`` not among those ids (``--kinds``: by kind);
    - per explain entry: the tracked objects freed when the explain log is emptied (collected
      before and after, so that tuples and dicts of atoms the collector untracks do not count),
      over the entries it held (``--kinds``: by kind)."""
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
        for _ in range(a.requests):
            await one(router, plugin, model)
    finally:
        gc.callbacks.remove(watch)
    new = [o for o in gc.get_objects(2) if id(o) not in old]
    print(f"arm {a.arm}, strategy {a.strategy}, {a.requests} requests after {a.warmup}, threshold {a.threshold}: "
          f"collections gen0/gen1/gen2 {counts[0]}/{counts[1]}/{counts[2]}; promoted to gen2 "
          f"{promoted[0] / a.requests:.2f} per request; new and alive in gen2 {len(new)} "
          f"({len(new) / a.requests:.2f} per request); tracked heap {len(gc.get_objects())}")
    if a.kinds:
        for k, n in Counter(kind(o) for o in new).most_common(25):
            print(f"  {n:6d}  {k}")
    del new
    if plugin is not None and plugin.runtime.explain:
        freed_per_entry(plugin.runtime, a.kinds)


def main(argv=None) -> int:
    a = bench.arguments(__doc__, argv, arm=("alias", "alias, plain, litellm (a Router without the plugin), wide (an alias over every "
                                                 "deployment), auto (the shipped auto, as the proxy count's "
                                                 "wide arm; --strategy does not apply) or group (LiteLLM alone, one "
                                                 "group of them all)"),
                        requests=(int, "measured requests (default 100, with --gc 600)"),
                        warmup=(int, "warm-up requests (default 30, with --gc 300)"), cprofile=False,
                        deployments=(1, "deployments in the Router (fillers added)"),
                        wide_aliases=(0, "more aliases, each over every deployment"),
                        collect=([], "module:Qualname: collect inside it only, one pass each (callgrind)"),
                        strategy=("ucb1", "the alias's strategy"),
                        history=(False, "each request a conversation's second turn, judging its stored first answer"),
                        gc=(False, "count what the requests leave to the garbage collector"), kinds=(False, "with --gc: by kind"),
                        threshold=(100, "with --gc: the young generation's threshold (gc.set_threshold)"))
    if a.arm not in ("alias", "plain", "litellm", "wide", "auto", "group"):
        raise SystemExit(f"--arm {a.arm}: choose alias, plain, litellm, wide, auto or group")
    a.requests = (600 if a.gc else 100) if a.requests is None else a.requests
    a.warmup = (300 if a.gc else 30) if a.warmup is None else a.warmup
    asyncio.run(run(a))
    return 0


if __name__ == "__main__":
    sys.exit(main())
