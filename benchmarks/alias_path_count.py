"""The alias path's cost per request in instructions, deterministic (no wall clock): a LiteLLM
Router in this process with the plugin as its callback (the benchmark's one-candidate alias
``auto/bench`` of proxy_rig.py), each request driven as the proxy drives it (pre-call hook,
``Router.acompletion`` with a mocked answer, headers hook, then LiteLLM's logging worker drained).

    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python \
        benchmarks/alias_path_count.py --arm alias --requests 200

Run it twice with different ``--requests`` under callgrind and divide the difference of the
totals by the difference of the counts: the per-request instructions of that arm (the start-up
cancels out). ``--cprofile`` prints call counts per request instead.

``--collect module:Qualname`` (repeatable) measures what each named function costs, inclusive, per
request: under ``valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no``, the measured
requests run once per function with collection switched on only inside it (from its outermost
entry to its exit, awaits included: the plugin's hooks do not suspend on the memory store), and
each pass is dumped under the function's name (``--callgrind-out-file=F`` gives F.1, F.2, ...;
``-`` as a name collects the whole requests, ``wrapper`` an empty function: the switch's own cost,
to subtract once per outermost call, which each pass prints). Callgrind's collection state is the
thread's own: these figures are the event loop's thread (the hooks'), not LiteLLM's thread-pool
work, which the totals of the instrumentation method above include.

    valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no --callgrind-out-file=cg.out \
        .venv/bin/python benchmarks/alias_path_count.py --requests 100 \
        --collect aisia_plugin.engine:Engine.decide --collect wrapper
    grep -H -e '^desc: Trigger' -e '^totals' cg.out.*

``--deployments N`` adds N - 1 filler deployments (proxy_overhead.py's model-list sizes) and
``--wide-aliases K`` K more aliases whose candidates are all of them (each a routing group of every
model name, as the default policy's aliases are); ``--arm litellm`` is the plain request on a Router
without the plugin (no callback, no groups). What production's ``auto`` costs, an alias over every
deployment: ``--arm wide`` asks the first such alias (one is added), ``--arm group`` is LiteLLM's own
choice among the same N deployments (a Router without the plugin, all N under the plain model's name). With ``--cprofile``, the first line is the totals:
whether a plain request's work grows with the model list or with the aliases' groups.

    .venv/bin/python benchmarks/alias_path_count.py --arm plain --cprofile --deployments 200 --wide-aliases 7"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
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
    policy: the benchmark's alias (its strategy `strategy`) and `wide_aliases` aliases over every
    deployment."""
    model_list = [_deployment(PLAIN, "bench-1")] + [_deployment(PLAIN if one_group else f"bench-filler-{i}",
                                                                f"filler-{i}") for i in range(1, deployments)]
    router = litellm.Router(model_list=model_list, routing_strategy="simple-shuffle")
    if not plugin_loaded:
        return router, None
    work = Path(tempfile.mkdtemp(prefix="aisia-count-"))
    wide = "".join(f"  auto/wide-{i}:\n    description: Every deployment.\n    strategy: ucb1\n"
                   for i in range(wide_aliases))
    (work / "policy.yaml").write_text(POLICY.replace("strategy: ucb1", f"strategy: {strategy}", 1) + wide)
    plugin = AisiaPlugin(load_policy_with_locations([work / "policy.yaml"]))
    plugin.boot()
    plugin.ensure_groups(router)
    litellm.callbacks = [plugin]
    return router, plugin


async def one(router, plugin, model: str):
    data = body(model)
    if plugin is not None:
        data = await plugin.async_pre_call_hook(Key(), None, data, "acompletion")
    resp = await router.acompletion(**data, mock_response="one two three four five six seven eight")
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
        import ctypes
        import mmap

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
        import ctypes

        buf = ctypes.create_string_buffer(name.encode())
        self._names.append(buf)
        self.request(self.DUMP_STATS_AT, ctypes.addressof(buf))


def collecting(cg: Callgrind, target: str, entries: list):
    """Wrap `target` (module:Qualname) so that callgrind collects only inside it, counting its
    outermost calls in ``entries[0]``; returns an undo."""
    import functools
    import importlib
    import inspect

    module, _, qual = target.partition(":")
    owner = importlib.import_module(module)
    *path, name = qual.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    fn = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
    depth = [0]
    toggle, code = cg.request, cg.TOGGLE_COLLECT

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def wrapper(*args, **kwargs):
            depth[0] += 1
            if depth[0] == 1:
                entries[0] += 1
                toggle(code)
            try:
                return await fn(*args, **kwargs)
            finally:
                depth[0] -= 1
                if not depth[0]:
                    toggle(code)
    else:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            depth[0] += 1
            if depth[0] == 1:
                entries[0] += 1
                toggle(code)
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
                if not depth[0]:
                    toggle(code)
    wrapped = type(original)(wrapper) if isinstance(original, (staticmethod, classmethod)) else wrapper
    setattr(owner, name, wrapped)
    return lambda: setattr(owner, name, original)


def _nothing() -> None:
    """The ``wrapper`` target of --collect: an empty function called once per request."""


def instr(state: str) -> None:
    """Under ``valgrind --tool=callgrind --instr-atstart=no``: switch the instrumentation (the
    measured requests only); a no-op otherwise."""
    if not os.environ.get("AISIA_CALLGRIND"):
        return
    import subprocess
    import time

    proc = subprocess.Popen(["callgrind_control", "-i", state, str(os.getpid())], stdout=subprocess.DEVNULL)
    while proc.poll() is None:  # keep running: callgrind serves the command between our instructions
        time.sleep(0.001)


async def run(arm: str, requests: int, warmup: int, profile: bool, deployments: int = 1, wide_aliases: int = 0,
              collect=()):
    if arm == "wide":
        wide_aliases = max(wide_aliases, 1)
    router, plugin = build(deployments, wide_aliases, plugin_loaded=arm not in ("litellm", "group"),
                           one_group=arm == "group")
    model = {"alias": ALIAS, "wide": "auto/wide-0"}.get(arm, PLAIN)
    for _ in range(warmup):
        await one(router, plugin, model)
    if collect:
        await collect_each(router, plugin, model, requests, collect)
        return
    if profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
    instr("on")
    for _ in range(requests):
        await one(router, plugin, model)
    instr("off")
    if profile:
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


async def collect_each(router, plugin, model: str, requests: int, targets) -> None:
    """One pass of `requests` per target, collected inside it only, dumped under its name."""
    cg = Callgrind()
    if not cg.request(cg.RUNNING):
        print("--collect: not under valgrind; the passes run uncounted", file=sys.stderr)
    cg.request(cg.START)
    for target in targets:
        if target == "-":
            cg.request(cg.TOGGLE_COLLECT)
            for _ in range(requests):
                await one(router, plugin, model)
            cg.request(cg.TOGGLE_COLLECT)
        else:
            entries = [0]
            undo = collecting(cg, f"{__name__}:_nothing" if target == "wrapper" else target, entries)
            call_nothing = globals()["_nothing"] if target == "wrapper" else None
            for _ in range(requests):
                await one(router, plugin, model)
                if call_nothing is not None:
                    call_nothing()
            undo()
            print(f"collected: {target}: {entries[0] / requests:g} outermost calls per request")
        cg.dump(f"{target} x{requests}")
    cg.request(cg.STOP)


def main(argv=None) -> int:
    a = bench.arguments(__doc__, argv, arm=("alias", "alias, plain, litellm (a Router without the plugin), wide (an alias over every "
                                                 "deployment) or group (LiteLLM alone, one group of them all)"),
                        requests=100, warmup=30, cprofile=False,
                        deployments=(1, "deployments in the Router (fillers added)"),
                        wide_aliases=(0, "more aliases, each over every deployment"),
                        collect=([], "module:Qualname: collect inside it only, one pass each (callgrind)"))
    if a.arm not in ("alias", "plain", "litellm", "wide", "group"):
        raise SystemExit(f"--arm {a.arm}: choose alias, plain, litellm, wide or group")
    asyncio.run(run(a.arm, a.requests, a.warmup, a.cprofile, a.deployments, a.wide_aliases, a.collect))
    return 0


if __name__ == "__main__":
    sys.exit(main())
