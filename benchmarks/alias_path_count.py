"""The alias path's cost per request in instructions, deterministic (no wall clock): a LiteLLM
Router in this process with the plugin as its callback (the benchmark's one-candidate alias
``auto/bench`` of proxy_rig.py), each request driven as the proxy drives it (pre-call hook,
``Router.acompletion`` with a mocked answer, headers hook, then LiteLLM's logging worker drained).

    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python \
        benchmarks/alias_path_count.py --arm alias --requests 200

Run it twice with different ``--requests`` under callgrind and divide the difference of the
totals by the difference of the counts: the per-request instructions of that arm (the start-up
cancels out). ``--cprofile`` prints call counts per request instead.

``--deployments N`` adds N - 1 filler deployments (proxy_overhead.py's model-list sizes) and
``--wide-aliases K`` K more aliases whose candidates are all of them (each a routing group of every
model name, as the default policy's aliases are); ``--arm litellm`` is the plain request on a Router
without the plugin (no callback, no groups). With ``--cprofile``, the first line is the totals:
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


def build(deployments: int = 1, wide_aliases: int = 0, plugin_loaded: bool = True):
    """The Router (the plain model and `deployments - 1` fillers) and the plugin (None without it);
    the policy: the benchmark's alias and `wide_aliases` aliases over every deployment."""
    model_list = [_deployment(PLAIN, "bench-1")] + [_deployment(f"bench-filler-{i}", f"filler-{i}")
                                                     for i in range(1, deployments)]
    router = litellm.Router(model_list=model_list, routing_strategy="simple-shuffle")
    if not plugin_loaded:
        return router, None
    work = Path(tempfile.mkdtemp(prefix="aisia-count-"))
    wide = "".join(f"  auto/wide-{i}:\n    description: Every deployment.\n    strategy: ucb1\n"
                   for i in range(wide_aliases))
    (work / "policy.yaml").write_text(POLICY + wide)
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


async def run(arm: str, requests: int, warmup: int, profile: bool, deployments: int = 1, wide_aliases: int = 0):
    router, plugin = build(deployments, wide_aliases, plugin_loaded=arm != "litellm")
    model = ALIAS if arm == "alias" else PLAIN
    for _ in range(warmup):
        await one(router, plugin, model)
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


def main(argv=None) -> int:
    a = bench.arguments(__doc__, argv, arm=("alias", "alias, plain or litellm (a Router without the plugin)"),
                        requests=100, warmup=30, cprofile=False,
                        deployments=(1, "deployments in the Router (fillers added)"),
                        wide_aliases=(0, "more aliases, each over every deployment"))
    if a.arm not in ("alias", "plain", "litellm"):
        raise SystemExit(f"--arm {a.arm}: choose alias, plain or litellm")
    asyncio.run(run(a.arm, a.requests, a.warmup, a.cprofile, a.deployments, a.wide_aliases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
