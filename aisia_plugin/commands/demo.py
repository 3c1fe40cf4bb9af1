"""`aisia demo`: a LiteLLM proxy with the plugin, in-memory state and six simulated providers on
loopback, ready within a minute and without any API key.

    aisia demo                               serve until Ctrl-C (type `help` for the commands)
    aisia demo --traffic 40 --break coder    simulated users converse (40 requests), `coder` is made
                                             to fail, 40 more; print where they went and what the
                                             router learned from the conversations, then stop
    aisia demo --traffic 40 --break coder --serve   the same, then keep serving

Exit status: 0 done, 1 the demo could not start or failed, 2 usage error."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import threading
import time

from ..demo.conversing import send_conversations
from ..demo.proxy import ProxyError
from ..demo.report import blended_price, candidates_by_alias, explained_decisions, frontier_shares, frontier_table, \
    learned_how, settled_signal_counts, uncounted_failures, uncounted_line
from ..demo.scenario import DEMO_UPSTREAMS, Demo, DemoError, bandit_stats, learned_table, list_aliases, provider_table, \
    routing_page, stats_delta, traffic_table, upstream_table
from ..demo.upstream import MODES

BREAK_MODES = tuple(m for m in MODES if m != "ok")
EXAMPLE_PROMPT = "Write a Python function that merges two sorted lists"


def add_arguments(p):
    p.add_argument("--port", type=int, default=None,
                   help="port of the proxy on 127.0.0.1 (default 4000, or a free one if 4000 is taken; 0 picks a free one)")
    p.add_argument("--master-key", default=None, help="the proxy's master key (default: a random sk-aisia-... key)")
    p.add_argument("--traffic", type=int, default=0, metavar="N",
                   help="simulated users converse with the aliases (N requests: questions, complaints, regenerates, "
                        "thanks, in English and French) and the demo prints where they went and what the router "
                        "learned; with --break, N before and N after the break. The demo then stops unless --serve")
    p.add_argument("--break", dest="break_", metavar="PROVIDER", default=None,
                   help="make one simulated provider fail (after the first traffic run, if any): "
                        "frontier, coder, swift, budget, flaky or local")
    p.add_argument("--break-mode", choices=BREAK_MODES, default="error",
                   help="how the broken provider fails (default: error, an HTTP 500 to every request)")
    p.add_argument("--serve", action="store_true", help="keep serving after the traffic runs, until Ctrl-C")
    p.add_argument("--feedback", action="store_true",
                   help="also post each answer's simulated quality to POST /aisia/feedback (no chat client does: "
                        "by default the router learns from the conversations alone)")
    p.add_argument("--no-feedback", action="store_true", help=argparse.SUPPRESS)  # the default since --feedback
    p.add_argument("--seed", type=int, default=0, help="seed of the sample traffic and of the simulated providers")
    p.add_argument("--workdir", default=None,
                   help="where the proxy's config and log and the decision log (decisions.jsonl, for aisia replay --logged) "
                        "are written (kept; default: a temporary folder removed at exit)")
    p.add_argument("--info-file", default=None, metavar="FILE",
                   help="write the URL, master key and providers' control URLs as JSON to FILE once the proxy serves")


def _say(*parts, err=False):
    print(*parts, file=sys.stderr if err else sys.stdout, flush=True)


class _Progress:
    """An elapsed-time line while something slow runs (on a terminal: one line rewritten)."""

    def __init__(self, what: str):
        self.what = what
        self.tty = sys.stderr.isatty()
        self.last = -1

    def __call__(self, elapsed: float):
        second = int(elapsed)
        if second == self.last:
            return
        self.last = second
        if self.tty:
            sys.stderr.write(f"\r{self.what} ... {second} s")
            sys.stderr.flush()
        elif second % 5 == 0:
            _say(f"{self.what} ... {second} s", err=True)

    def done(self, message: str):
        if self.tty:
            sys.stderr.write("\r" + " " * (len(self.what) + 12) + "\r")
            sys.stderr.flush()
        _say(message, err=True)


def _banner(demo: Demo, aliases: list[str], page: str | None, serving: bool) -> str:
    """What the demo started; with `serving` (the proxy keeps serving after any traffic: --serve,
    or no --traffic), how to call it, watch it and replay its log; without, only what the run
    uses, nothing that names a proxy that has stopped by the time it is read."""
    i = demo.info()
    url, key = i["url"], i["master_key"]
    rows = [["provider", "model", "latency", "errors", "$/1M in/out", "strong at", "control (POST)"]]
    for name, u in i["upstreams"].items():
        strong = ", ".join(d for d, s in u["strengths"].items() if s >= 0.85) or "-"
        rows.append([name + (" (local)" if u["local"] else ""), u["model"], f"{u['latency_ms']:g} ms",
                     f"{u['error_rate']:.0%}", f"{u['input_cost_per_1m']:g}/{u['output_cost_per_1m']:g}", strong,
                     u["control"]])
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    table = "\n".join("  " + "  ".join(r[c].ljust(widths[c]) for c in range(len(r))).rstrip() for r in rows)
    curl = (f"curl -s {url}/v1/chat/completions -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' \\\n"
            f"    -d '{{\"model\": \"auto/coding\", \"messages\": [{{\"role\": \"user\", \"content\": \"{EXAMPLE_PROMPT}\"}}]}}' -i")
    py = (f"from openai import OpenAI\n"
          f"    client = OpenAI(base_url=\"{i['base_url']}\", api_key=\"{key}\")\n"
          f"    r = client.chat.completions.with_raw_response.create(\n"
          f"        model=\"auto/coding\", messages=[{{\"role\": \"user\", \"content\": \"{EXAMPLE_PROMPT}\"}}])\n"
          f"    print(r.headers[\"x-litellm-model-id\"], r.headers.get(\"x-aisia-reason\"), r.parse().choices[0].message.content)")
    ups = i["upstreams"]
    page_line = f"    or open the routing page in a browser and sign in with the master key: {page}\n" if page else ""
    if i["workdir_kept"]:
        log_line = i["decision_log"]
    elif serving:
        log_line = f"{i['decision_log']}   (while the demo serves: --workdir DIR keeps it after)"
    else:
        log_line = "not kept after this run (--workdir DIR keeps it, for aisia replay --logged)"
    victim = "coder" if "coder" in ups else next(iter(ups), "")
    control = ups[victim]["control"] if victim else ""
    stops = ("\nThe proxy serves while the sample traffic runs, then stops: --serve keeps it serving "
             "(this banner then says how to call it, break a provider and replay the decision log).")
    how_to = f"""\nAsk with curl (the x-litellm-model-id and x-aisia-* response headers say who served and why):
    {curl}

Ask with the openai client:
    {py}

Watch the learning (bandit statistics and breaker states):
    curl -s {url}/admin/bandit/stats -H 'Authorization: Bearer {key}'
{page_line}
Make {victim} fail (any provider: its control URL above, or start with --break NAME); {{"mode": "ok"}} repairs it:
    curl -s -X POST {control} -d '{{"mode": "error"}}'

The router's metrics (breaker states, choices per strategy, decisions, learned rewards):
    curl -s {url}/metrics -H 'Authorization: Bearer {key}' | grep -E '^ai_'

What would a policy edit (auto: cheapest healthy deployment) have earned on the traffic logged so far?
    {demo.replay_command()}"""
    return f"""
AISIA demo: a LiteLLM proxy with the aisia plugin, in-memory state, {len(i['upstreams'])} simulated providers (no API keys)

  URL          {url}   (OpenAI base URL: {i['base_url']})
  master key   {key}
  aliases      {', '.join(aliases) or '(none listed: see the log)'}
  routing page {page + '   (sign in with the master key)' if page else '(not served: see the log)'}
  metrics      {url}/metrics (LiteLLM's Prometheus endpoint) and {url}/aisia/metrics, both with the master key
  decision log {log_line}
  config, log  {i['config']}, {i['log']}

{table}
{how_to if serving else stops}
"""


def _traffic(demo: Demo, n: int, label: str, args, first: int = 0):
    """`n` requests of conversing users (numbered from `first`): (their turns, what each
    provider received meanwhile)."""
    progress = _Progress(f"simulated users converse: {n} requests ({label})")
    started = time.monotonic()
    before = demo.upstream_stats()
    turns = send_conversations(demo.proxy, n, seed=args.seed + (0 if label == "before" else 1), first=first,
                               feedback=args.feedback and not args.no_feedback,
                               on_done=lambda k: progress(time.monotonic() - started))
    outcomes = [t.outcome for t in turns]
    errors = sum(1 for o in outcomes if not o.ok)
    progress.done(f"{n} requests ({label}): {n - errors} answered, {errors} errors")
    for o in outcomes:
        if not o.ok:
            _say(f"  error {o.status} for {o.alias}: {o.error[:300]}", err=True)
            break
    return turns, stats_delta(before, demo.upstream_stats())


def _break(demo: Demo, name: str, mode: str) -> str:
    u = demo.upstream(name)
    u.control(mode=mode)
    what = {"error": "answers HTTP 500 to every request", "timeout": "never answers",
            "slow": "answers after 3 s", "malformed": "answers invalid JSON", "stream_break": "drops its connections",
            "rate_limit": "answers 429 (rate limited)"}[mode]
    return f"provider {name} now {what} ({mode} mode)"


def _learned(demo: Demo, turns: list, args) -> None:
    """What the router learned from the conversations: the frontier shares, the evidence per
    deployment, and what taught it (signals by kind and language; feedback only with --feedback)."""
    feedback = args.feedback and not args.no_feedback
    try:
        prices = {name: blended_price(u) for name, u in demo.info()["upstreams"].items()}
        rows = frontier_shares(turns, candidates_by_alias(explained_decisions(demo.proxy)), prices)
        _say("\nThe frontier's share per alias (its most expensive candidate): of the answered requests on hard prompts "
             "(coding, math: the cheap providers often get them wrong) and on easy ones, in the first and the last "
             "third of the run" + (f" (the last third follows the break of {args.break_})" if args.break_ else ""))
        _say(frontier_table(rows))
        complaints = sum(1 for t in turns if t.said != "question")
        counts = settled_signal_counts(demo.proxy, expected=complaints)
        stats = bandit_stats(demo.proxy)
        _say("\nWhat the plugin learned (GET /admin/bandit/stats): calls learned (health), and apart from them the quality "
             "evidence by source (conversation signals, feedback, judge; docs/quality.md) and the estimate it gives from "
             "the declared tier's prior; the breaker opens on repeated failures")
        _say(learned_table(stats, [u.name for u in demo.upstreams]))
        uncounted = uncounted_line(uncounted_failures(demo.proxy))
        if uncounted:
            _say("\n" + uncounted)
        _say("\n" + learned_how(counts, turns, feedback))
    except (DemoError, ValueError, OSError) as exc:
        _say(f"(what the plugin learned could not be read: {exc})", err=True)


def _summary(before, after, broken: str) -> str:
    served_before = sum(1 for o in before if o.ok and o.served_by == broken)
    served_after = sum(1 for o in after if o.ok and o.served_by == broken)
    errors_after = sum(1 for o in after if not o.ok)
    return (f"{broken} answered {served_before} of {len(before)} requests before the break and {served_after} of "
            f"{len(after)} after it; clients saw {errors_after} errors after it.")


_HELP = """commands: break NAME [MODE]   make a provider fail (modes: %s)
          fix NAME              restore it
          traffic N             send N sample requests and show where they went
          stats [--json]        what the plugin learned (GET /admin/bandit/stats)
          providers             what each simulated provider received
          quit                  stop everything (Ctrl-C does the same)""" % ", ".join(BREAK_MODES)


def _interactive(demo: Demo, args) -> None:
    _say(_HELP)
    while True:
        try:
            line = input("aisia-demo> ")
        except EOFError:
            return
        words = shlex.split(line) if line.strip() else []
        if not words:
            continue
        cmd, rest = words[0].lower(), words[1:]
        try:
            if cmd in ("quit", "exit", "q"):
                return
            if cmd == "break" and rest:
                mode = rest[1] if len(rest) > 1 else "error"
                if mode not in BREAK_MODES:
                    raise DemoError(f"mode {mode!r} is not one of {', '.join(BREAK_MODES)}")
                _say(_break(demo, rest[0], mode))
            elif cmd == "fix" and rest:
                demo.upstream(rest[0]).control(mode="ok")
                _say(f"provider {rest[0]} serves normally again")
            elif cmd == "traffic":
                n = int(rest[0]) if rest else 20
                turns, _ = _traffic(demo, n, "now", args)
                _say(traffic_table([("now", [t.outcome for t in turns])]))
            elif cmd == "stats":
                stats = bandit_stats(demo.proxy)
                _say(json.dumps(stats, indent=2) if rest == ["--json"] else
                     learned_table(stats, [u.name for u in demo.upstreams]))
            elif cmd == "providers":
                _say(upstream_table(demo.upstream_stats()))
            else:
                _say(_HELP)
        except (DemoError, ValueError) as exc:
            _say(f"error: {exc}", err=True)


def _wait_for_signal(stop: threading.Event) -> None:
    while not stop.wait(3600):
        pass


def _run_traffic(demo: Demo, args) -> None:
    """The demo's traffic (before and after the break when there is one), then what it shows:
    where the requests went, what each simulated provider received, what the router learned,
    the break's summary and where the decision log is."""
    phases, provider_phases, turns = [], [], []
    label = "before" if args.break_ else "traffic"
    run, delta = _traffic(demo, args.traffic, label, args)
    turns.extend(run)
    phases.append((label, [t.outcome for t in run]))
    provider_phases.append((label, delta))
    if args.break_:
        _say(_break(demo, args.break_, args.break_mode))
        run, delta = _traffic(demo, args.traffic, "after", args, first=args.traffic)
        turns.extend(run)
        phases.append(("after", [t.outcome for t in run]))
        provider_phases.append(("after", delta))
    _say("\nWhere the requests went (deployment that answered, per alias):")
    _say(traffic_table(phases))
    _say("\nWhat each simulated provider received (failed attempts were retried on another provider):")
    _say(provider_table(provider_phases))
    _learned(demo, turns, args)
    if args.break_:
        _say("\n" + _summary(phases[0][1], phases[1][1], args.break_))
    if demo.keep_workdir or args.serve:
        _say(f"\nThe decisions are logged in {demo.decision_log}"
             + ("" if demo.keep_workdir else " (while the demo serves: --workdir DIR keeps it)")
             + "; a policy edit estimated on them:\n    " + demo.replay_command())
    else:
        _say("\nThe decision log of this run is not kept: --workdir DIR keeps it, to estimate a policy edit "
             "on it with aisia replay --logged")


def run(args) -> int:
    if args.traffic < 0:
        _say("error: --traffic must be >= 0", err=True)
        return 2
    if args.port is not None and not 0 <= args.port <= 65535:
        _say("error: --port must be between 0 and 65535", err=True)
        return 2
    demo = Demo(port=args.port, master_key=args.master_key, workdir=args.workdir, seed=args.seed)
    names = [s.name for s in DEMO_UPSTREAMS]
    if args.break_ and args.break_ not in names:
        _say(f"error: no simulated provider named {args.break_!r}; the providers are: {', '.join(names)}", err=True)
        return 2

    stop = threading.Event()

    def on_term(signum, frame):
        # SIGTERM ends the demo as Ctrl-C does: everything stopped in order.
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    ok = False
    try:
        progress = _Progress("starting the LiteLLM proxy with the aisia plugin")
        started = time.monotonic()
        demo.start(on_wait=progress)
        progress.done(f"proxy ready in {time.monotonic() - started:.0f} s")
        if demo.port_note:
            _say(f"note: {demo.port_note}", err=True)
        if args.info_file:
            with open(args.info_file + ".tmp", "w", encoding="utf-8") as fh:
                json.dump(demo.info(), fh, indent=2)
            os.replace(args.info_file + ".tmp", args.info_file)
        _say(_banner(demo, list_aliases(demo.proxy), routing_page(demo.proxy), serving=args.serve or not args.traffic))

        if args.traffic:
            _run_traffic(demo, args)
            if not args.serve:
                ok = True
                return 0
        elif args.break_:
            _say(_break(demo, args.break_, args.break_mode))

        _say("serving; Ctrl-C stops the proxy and the simulated providers")
        if sys.stdin.isatty():
            _interactive(demo, args)
        else:
            _wait_for_signal(stop)
        ok = True
        return 0
    except KeyboardInterrupt:
        ok = True
        return 0
    except (DemoError, ProxyError) as exc:
        _say(f"\nerror: {exc}", err=True)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        try:
            demo.stop(remove_workdir=ok)
        except KeyboardInterrupt:
            demo.stop(remove_workdir=ok)
        if not ok and not demo.keep_workdir:
            _say(f"(the proxy's config and log are kept in {demo.workdir})", err=True)
        _say("demo stopped", err=True)

