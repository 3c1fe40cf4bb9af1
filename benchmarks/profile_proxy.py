"""Where the proxy's per-request time goes, with and without the plugin, per hook and step.

One LiteLLM proxy without any callback and one with the plugin (the config and instant upstream of
proxy_rig.py), each under proxy_rig's metering wrapper (`metered`: a full collection and the meter
started on SIGUSR1, written out on SIGUSR2). Arms: `litellm` (a plain model on the proxy without
callback), `plain` (the same name on the plugin's proxy, before it serves any alias) and `alias`.

* timing mode: no profiler; the plugin's hooks and LiteLLM's functions named in TIMED wrapped with
  a clock (wall time per call, per arm), and the collector's time per generation: the hooks' cost.
* cprofile mode: cProfile over the event loop's thread (not LiteLLM's thread-pool work), for
  ranking (each call costs more under it); each arm against `litellm`: the functions whose own and
  inclusive time grew most, and the call counts per request that differ (which LiteLLM path a hook
  switches on). The .prof files go to benchmarks/out/profile/.

    .venv/bin/python benchmarks/profile_proxy.py --write       # benchmarks/results/proxy_profile.md

* count mode: instructions per request of the whole proxy process (every thread), which the
  machine's load does not move: each proxy under callgrind, instrumented only around the measured
  requests (``callgrind_control``), net of its idle rate. Two more arms, what production's ``auto``
  costs: `wide` (the shipped ``auto``, every deployment its candidate) and `group` (LiteLLM alone,
  every deployment under one model name). Each arm is counted in ``--rounds`` rounds one after the
  other (3), and the median reported beside every round: a proxy's background job whose period is
  longer than the idle windows lands in one round, not in the figure.

    .venv/bin/python benchmarks/profile_proxy.py --modes count --deployments 1,16,200 --requests 60

* group mode: the same count for the alias against LiteLLM serving the alias's name as its own
  routing group, of the shape the plugin installs, on a proxy without the plugin (`native`): what
  the routing group costs LiteLLM by itself; then on that group with a callback that overrides
  nothing (`bare`) and with callback_floor.py's, which overrides the plugin's hooks and does nothing
  in them (`floor`): what LiteLLM charges any router built as such a callback
  (results/proxy_group_count.md), and the shipped `auto` beside them (`wide`).

    .venv/bin/python benchmarks/profile_proxy.py --modes group --deployments 1 --requests 150 --warmup 100"""

from __future__ import annotations

import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench
import httpx
from callback_floor import CallbackFloor, overridden
from proxy_rig import (ALIAS, BARE, FLOOR, PLAIN, check, drive, meter_start, meter_stop, metered, proxies,
                       run_litellm_as, upstream)

import aisia_plugin.demo.proxy as proxy_mod
from aisia_plugin.demo.proxy import Proxy
from aisia_plugin.litellm.callback import AisiaPlugin

OUT = bench.OUT / "profile"
# What the timing mode clocks: the plugin's hooks, and LiteLLM's work that a routing group adds.
TIMED = [f"{module}:{name}" for module, names in {
    "aisia_plugin.litellm.callback": [
        "AisiaPlugin.async_pre_call_hook", "AisiaPlugin.async_filter_deployments", "AisiaPlugin.async_log_success_event",
        "AisiaPlugin.async_post_call_response_headers_hook", "AisiaPlugin._learn_attempt"],
    "aisia_plugin.litellm.startup": ["ProxyLife.ensure_groups", "_proxy_server"],
    "aisia_plugin.litellm.headers": ["one_line"],
    "aisia_plugin.litellm.events": ["success"],
    "aisia_plugin.litellm.runtime": ["Runtime.open_call", "Runtime.deployments", "Runtime.explain_entry",
                                     "Runtime.note_served", "Runtime.close_call"],
    "aisia_plugin.state.memory": ["MemoryState.prepare"],
    "aisia_plugin.decision": ["Decision.reason"],
    "aisia_plugin.metrics": ["RouterMetrics.decision", "RouterMetrics.outcome"],
    "aisia_plugin.engine": ["Engine.decide", "Engine.record"],
    "aisia_plugin.litellm.observability": ["Observer.decided", "Observer.learned"],
    "litellm.router": ["Router.get_model_list", "Router.async_get_available_deployment",
                       "Router.async_callback_filter_deployments", "Router.acompletion"],
    "litellm.proxy.utils": ["ProxyLogging.pre_call_hook", "ProxyLogging.post_call_response_headers_hook",
                            "ProxyLogging.post_call_success_hook", "ProxyLogging.during_call_hook"],
    "litellm.litellm_core_utils.litellm_logging": ["Logging.async_success_handler"],
    "litellm.proxy.route_llm_request": ["route_request"],
}.items() for name in names]
GC = ["gc.gen0", "gc.gen1", "gc.gen2"]


def _profile(proxy: Proxy, client: httpx.Client, model: str, n: int, suffix: str) -> Path:
    meter_start(proxy)
    failed = drive(client, proxy, model, n)
    time.sleep(1.0)  # the last responses' logging tasks
    if failed:
        bench.progress(f"{model}: {failed} of {n} requests failed")
    return meter_stop(proxy, suffix)


def report(profiles: dict, n: int, top: int) -> str:
    """Each arm against plain LiteLLM (the first arm): the functions whose own and inclusive time
    grew most, and the call counts per request that differ (a hook called, a deep copy)."""
    t = {arm: bench.per_call(pstats.Stats(str(path)), n) for arm, path in profiles.items()}
    base_name, *arms = list(t)
    base, zero = t[base_name], (0.0, 0.0, 0.0)
    total = {arm: sum(v[1] for v in table.values()) for arm, table in t.items()}
    lines = [f"Per request, under cProfile (the event loop's thread), {n} sequential requests per arm; load average "
             f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} at the end. Own time per request: "
             + ", ".join(f"{a} {v:.0f} us" for a, v in total.items()) + ".", "```"]
    for arm in arms:
        table = t[arm]
        keys = set(table) | set(base)
        grew = lambda col: sorted(keys, key=lambda k: base.get(k, zero)[col] - table.get(k, zero)[col])[:top]  # noqa
        for title, col in (("own time (tottime)", 1), ("inclusive time (cumtime)", 2)):
            lines += ["", f"{arm} vs {base_name}: {title} that grew most", f"{'diff us':>9} {arm + ' us':>10} "
                      f"{'calls/req':>16}  function"]
            for k in grew(col):
                a, b = table.get(k, zero), base.get(k, zero)
                lines.append(f"{a[col] - b[col]:+9.1f} {a[col]:10.1f} {a[0]:7.1f}/{b[0]:<8.1f}  {bench.function_name(k)}")
        lines += ["", f"{arm} vs {base_name}: calls per request that differ most ({arm}/{base_name})"]
        for k in sorted(keys, key=lambda k: -abs(table.get(k, zero)[0] - base.get(k, zero)[0]))[:top]:
            lines.append(f"{table.get(k, zero)[0]:8.1f} / {base.get(k, zero)[0]:<8.1f} {bench.function_name(k)}")
    return "\n".join(lines + ["```"]) + "\n"


def timing_report(timings: dict, n: int) -> str:
    """Wall time per call of each clocked function (TIMED) per arm, in microseconds, as a table."""
    arms = {arm: json.loads(path.read_text()) for arm, path in timings.items()}
    rows = [[f"`{name}`", arm, f"{len(t) / n:.2f}", f"{1e6 * statistics.median(t):.1f}",
             f"{1e6 * sum(t) / n:.1f}"] for name in TIMED + GC for arm, times in arms.items() if (t := times.get(name))]
    return "\n".join([f"Wall time per call, no profiler, {n} sequential requests per arm (load average "
                      f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} at the end); async hooks from the call to "
                      "their return, awaits included; `gc.genN`: the collector's CPU per collection.", ""]
                     + bench.md_table(["function", "arm", "calls/req", "median us", "us/req"], rows, "---:")) + "\n"


WINDOW_S = 5.0  # the count mode's windows: the idle rate's, and the requests' tail's
MAX_WINDOWS = 60  # a proxy that never settles is reported, not waited for


def _control(proxy: Proxy, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(proxy.pid)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def _instructions(proxy: Proxy, *command: str) -> int:
    """Run callgrind_control `command` on the proxy, then dump its counters (which zeroes them):
    the instructions since the last zeroing, every thread."""
    if command:
        _control(proxy, *command)
    _control(proxy, "-d")
    newest = max(proxy.workdir.glob(f"callgrind.out.{proxy.pid}.*"), key=lambda f: int(f.suffix[1:]))
    return next(int(line.split()[1]) for line in newest.read_text(errors="replace").splitlines()
                if line.startswith("totals:"))


def _idle_rate(proxy: Proxy) -> float:
    """Instructions per second of the proxy left alone, once what earlier requests left running
    (LiteLLM's logging worker, the plugin's after-response steps: slow under callgrind) is done:
    5 s windows until three in a row agree within 25 %, the least of them."""
    rates: list[float] = []
    while len(rates) < 3 or max(rates[-3:]) > 1.25 * min(rates[-3:]):
        if len(rates) >= MAX_WINDOWS:
            raise SystemExit(f"count: the proxy's idle rate did not settle in {MAX_WINDOWS} windows: {rates}")
        time.sleep(WINDOW_S)
        rates.append(_instructions(proxy) / WINDOW_S)
    return min(rates[-3:])


def count(proxy: Proxy, client: httpx.Client, model: str, n: int) -> dict:
    """Instructions per request of `n` sequential requests, counted from the first until the
    proxy is back to its idle rate, net of that rate."""
    _control(proxy, "-i", "on")
    drive(client, proxy, model, 20)  # the instrumented code's first runs
    idle = _idle_rate(proxy)
    started, busy = time.monotonic(), 0
    failed = drive(client, proxy, model, n)
    for _ in range(MAX_WINDOWS):
        time.sleep(WINDOW_S)
        busy += (last := _instructions(proxy))
        if last <= 1.5 * idle * WINDOW_S:
            break
    else:
        raise SystemExit(f"count: the proxy did not come back to its idle rate within {MAX_WINDOWS} windows")
    _control(proxy, "-i", "off")
    return {"per_request": (busy - idle * (time.monotonic() - started)) / n, "idle_per_s": idle, "failed": failed}


def rounds_of(counts: list) -> dict:
    """An arm's rounds (``count`` each, one after the other on the same proxy) as one figure:
    their median, with every round kept. A background job of the proxy's with a period longer
    than the idle windows (a minute's, a full collection) lands in one round and not the next:
    the median is not moved by one such round, and the rounds' spread shows how far it moved one."""
    per = [c["per_request"] for c in counts]
    return {"per_request": statistics.median(per), "rounds": per,
            "idle_per_s": statistics.median(c["idle_per_s"] for c in counts),
            "failed": sum(c["failed"] for c in counts)}


# Per arm: (plugin loaded, every deployment under one name, LiteLLM's own routing group under the
# alias's name), and the model asked for. Arms of one configuration share its proxy.
COUNT_ARMS = {"litellm": ((False, False, False), PLAIN), "plain": ((True, False, False), PLAIN),
              "alias": ((True, False, False), ALIAS), "wide": ((True, False, False), "auto"),
              "group": ((False, True, False), PLAIN)}
GROUP_ARMS = {"litellm": ((False, False, True), PLAIN), "native": ((False, False, True), ALIAS),
              "bare_plain": ((BARE, False, True), PLAIN), "bare": ((BARE, False, True), ALIAS),
              "floor_plain": ((FLOOR, False, True), PLAIN), "floor": ((FLOOR, False, True), ALIAS),
              "plain": ((True, False, False), PLAIN), "alias": ((True, False, False), ALIAS),
              "wide": ((True, False, False), "auto")}


def counted(base_url: str, sizes, n: int, warmup: int, work: Path, arms: dict, rounds: int) -> dict:
    """size -> arm -> ``rounds_of`` its `rounds` counts, its proxy under callgrind (one proxy
    per configuration)."""
    run_litellm_as(work / "litellm-callgrind", f"#!/bin/sh\nexec valgrind --tool=callgrind --instr-atstart=no "
                   f"--callgrind-out-file=callgrind.out.%p {sys.executable} {proxy_mod.litellm_executable()} \"$@\"\n")
    results = {}
    for size in sizes:
        got = results[size] = {}
        for config in dict.fromkeys(key for key, _ in arms.values()):
            plugin, one_group, native_group = config
            if one_group and size == 1:
                continue  # one deployment: the group is the litellm arm's
            bench.progress(f"count: {size} deployments, starting a proxy under callgrind ...")
            with proxies(base_url, size, work / f"{size}-{plugin}-{one_group}-{native_group}", {"proxy": plugin},
                         one_group, 900, native_group) as running, httpx.Client(timeout=300) as client:
                for arm, (key, model) in arms.items():
                    if key == config:
                        check(client, running["proxy"], model)
                        drive(client, running["proxy"], model, warmup)
                        got[arm] = rounds_of([count(running["proxy"], client, model, n) for _ in range(rounds)])
                        bench.progress(f"count: {size} deployments, {arm}: {got[arm]['per_request'] / 1e6:.3f} M "
                                       "instructions per request (rounds: "
                                       + ", ".join(f"{r / 1e6:.3f}" for r in got[arm]["rounds"]) + ")")
    return results


def _count_text(n: int, warmup: int, what: str, header: list, rows: list, results: dict) -> str:
    rounds = max(len(got["rounds"]) for by_arm in results.values() for got in by_arm.values())
    spread = []
    for size, by_arm in results.items():
        listed = []
        for arm, got in by_arm.items():
            if any(got is other for other in listed):
                continue  # an arm standing for another (the count mode's `group` at 1 deployment) is listed once
            listed.append(got)
            spread.append(f"| {size} | {arm} | " + " | ".join(f"{r / 1e6:.3f}" for r in got["rounds"])
                          + f" | {(max(got['rounds']) - min(got['rounds'])) / got['per_request']:.4f} |")
    return "\n".join([
        f"Instructions per request of the whole proxy process (M; callgrind, every thread), {n} sequential "
        f"requests per arm and round after {warmup} warm-up requests and 20 instrumented ones, counted until the "
        f"proxy was back to its idle rate (measured just before them, {WINDOW_S:g} s windows), net of that rate; "
        f"the median of {rounds} such rounds, run one after the other on the arm's proxy. {what}", ""]
        + bench.md_table(header, rows, "---:")
        + ["", "Each round (M per request) and the rounds' spread, (max - min) / median:", "",
           "| deployments | arm | " + " | ".join(f"round {k + 1}" for k in range(rounds)) + " | spread |",
           "|---|---|" + "---:|" * (rounds + 1), *spread]) + "\n"


def _write_counts(name: str, title: str, n: int, warmup: int, results: dict, text: str) -> None:
    bench.write_results(name, {"requests": n, "warmup": warmup, "window_s": WINDOW_S, "results": results,
                               **bench.conditions()}, f"# {title}\n\n" + text)


def count_mode(base_url: str, sizes, n: int, warmup: int, work: Path, rounds: int) -> str:
    """The count mode's table: instructions per request per arm and model-list size."""
    results, rows = counted(base_url, sizes, n, warmup, work, COUNT_ARMS, rounds), []
    for size, got in results.items():
        got.setdefault("group", got["litellm"])
        base, group = got["litellm"]["per_request"], got["group"]["per_request"]
        rows.append([str(size)] + [f"{got[a]['per_request'] / 1e6:.3f}" for a in COUNT_ARMS]
                    + [f"{got['plain']['per_request'] / base:.4f}", f"{got['alias']['per_request'] / base:.4f}",
                       f"{got['wide']['per_request'] / group:.4f}"])
    text = _count_text(n, warmup, "`wide`: the shipped `auto`, over every deployment; `group`: LiteLLM without the "
                       "plugin, every deployment under one model name (at 1 deployment: the litellm arm).",
                       ["deployments", "litellm", "plain", "alias", "wide", "group", "plain / litellm",
                        "alias / litellm", "wide / group"], rows, results)
    _write_counts("proxy_count", "Whole-proxy instructions per request", n, warmup, results, text)
    return text


def group_mode(base_url: str, sizes, n: int, warmup: int, work: Path, rounds: int) -> str:
    """The group mode's table: the alias against LiteLLM serving the same name as its own routing
    group, without the plugin (what a routing group costs LiteLLM by itself), with a callback that
    overrides nothing, and with callback_floor.py's (what LiteLLM charges any callback router)."""
    if overridden(CallbackFloor) != overridden(AisiaPlugin):
        raise SystemExit(f"callback_floor.py overrides {sorted(overridden(CallbackFloor))}, the plugin "
                         f"{sorted(overridden(AisiaPlugin))}: the floor must override the same hooks")
    results, rows = counted(base_url, sizes, n, warmup, work, GROUP_ARMS, rounds), []
    for size, got in results.items():
        per = {a: got[a]["per_request"] for a in GROUP_ARMS}
        base = per["litellm"]
        rows.append([str(size)] + [f"{v / 1e6:.3f}" for v in per.values()]
                    + [f"{per[a] / base:.4f}" for a in list(GROUP_ARMS)[1:]]
                    + [f"{per['alias'] / per['floor']:.4f}", f"{per['wide'] / per['floor']:.4f}"])
    text = _count_text(n, warmup, "`litellm`: a plain name on a proxy without the plugin; `native`: the alias's name "
                       "on that proxy, LiteLLM's own routing group of the shape the plugin installs (priority, the "
                       "alias's one member); `bare_plain`, `bare`: the plain name and the alias on a proxy with that "
                       "group and a callback that overrides nothing (what LiteLLM does for any callback); "
                       "`floor_plain`, `floor`: the same with callback_floor.py's callback, which overrides the "
                       "plugin's hooks and does nothing in them (what LiteLLM charges any router built as such a "
                       "callback); `plain`, `alias`: the same on a proxy with the plugin; `wide`: the shipped "
                       "`auto` on it (the contextual strategy, over every deployment).",
                       ["deployments"] + list(GROUP_ARMS) + [f"{a} / litellm" for a in list(GROUP_ARMS)[1:]]
                       + ["alias / floor", "wide / floor"], rows, results)
    _write_counts("proxy_group_count", "The alias against LiteLLM's own routing group, in instructions", n, warmup,
                  results, text)
    return text


def main(argv=None) -> int:
    args = bench.arguments(__doc__, argv, requests=(1000, "profiled sequential requests per arm"), warmup=200,
                           top=25, deployments=("1", "deployments in the config (count and group modes: comma-separated)"),
                           modes=("timing,cprofile", "timing: wall time per call of TIMED, no profiler; cprofile: "
                                  "profiles and their differences; count: instructions per request (callgrind); "
                                  "group: the alias against LiteLLM's own routing group, counted likewise"),
                           rounds=(3, "count and group modes: rounds per arm, one after the other (the median is "
                                   "reported, each round beside it)"),
                           write=(False, "write benchmarks/results/proxy_profile.md"))
    if args.rounds < 1:
        raise SystemExit(f"--rounds {args.rounds}: at least 1 round per arm")
    work = Path(tempfile.mkdtemp(prefix="aisia-profile-"))
    sections = {}
    sizes = [int(x) for x in str(args.deployments).split(",")]
    with upstream() as base_url:
        for mode, run in (("count", count_mode), ("group", group_mode)):
            if mode in args.modes.split(","):
                sections[mode] = run(base_url, sizes, args.requests, args.warmup, work / mode, args.rounds)
        metered(work, TIMED)  # Proxy.start runs the metering wrapper instead of litellm
        for mode in (m for m in args.modes.split(",") if m not in ("count", "group")):
            bench.progress(f"{mode}: starting the proxies under the profiling wrapper ...")
            with proxies(base_url, sizes[0], work / mode, {"litellm": False, "plugin": True},
                         AISIA_PROFILE_MODE=mode) as running, httpx.Client(timeout=30) as client:
                out = {}
                # The plugin's proxy gets its plain traffic first, then the alias.
                for arm, proxy, model in (("litellm", running["litellm"], PLAIN), ("plain", running["plugin"], PLAIN),
                                          ("alias", running["plugin"], ALIAS)):
                    check(client, proxy, model)
                    drive(client, proxy, model, args.warmup)
                    bench.progress(f"{mode}: {arm}, {args.requests} requests ...")
                    out[arm] = _profile(proxy, client, model, args.requests, ".json" if mode == "timing" else ".prof")
            if mode == "timing":
                sections[mode] = timing_report(out, args.requests)
                continue
            sections[mode] = report(out, args.requests, args.top)
            OUT.mkdir(parents=True, exist_ok=True)
            for arm, path in out.items():
                (OUT / f"{arm}.prof").write_bytes(path.read_bytes())
    text = "\n".join(f"## {mode}\n\n{body_}" for mode, body_ in sections.items())
    print(text)
    if args.write:  # the generated part of the file; the analysis written around it is kept
        bench.replace_blocks(bench.RESULTS / "proxy_profile.md", {"profile_proxy": [
            f"Generated {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} by `benchmarks/profile_proxy.py "
            f"--deployments {args.deployments} --modes {args.modes}`; {bench.conditions()['platform']}, "
            f"litellm {bench.version('litellm')}.",
            "", text.rstrip("\n")]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
