"""`aisia stats`: what the router has learned, from the configured store (per deployment and per
domain: count, discounted pulls, mean reward, Beta posterior, latency, error rate; beside that
health, the quality estimate, its prior and the quality evidence by source: conversation signals,
feedback, judge (docs/quality.md); the breaker), a
summary of the contextual strategy's models when there are any and each spend target with its
realised spend and multiplier (the table only), and `--reset DEPLOYMENT` for an operator who
knows a provider is fixed."""

from __future__ import annotations

import asyncio
import json
import sys


def add_arguments(p):
    p.add_argument("--policy", action="append", metavar="PATH",
                   help="policy file or directory (repeatable; default: the configured policy path, AISIA_POLICY)")
    p.add_argument("--state", metavar="FILE",
                   help="memory store: the snapshot to read (default: the policy's state.snapshot_path)")
    p.add_argument("--json", action="store_true",
                   help="print the /admin/bandit/stats JSON (plus count, latency, error rate, breaker, domains)")
    p.add_argument("--reset", metavar="DEPLOYMENT", action="append",
                   help="forget a deployment's statistics and breaker (repeatable), then print the rest")
    from . import live

    live.add_arguments(p)


COLUMNS = ("deployment", "domain", "count", "pulls", "mean reward", "alpha", "beta", "avg latency s", "error rate",
           "quality", "prior", "signals", "feedback", "judge", "breaker")


def _num(value, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def quality_cells(row: dict) -> list[str]:
    """A stats row's quality beside its health: the estimate, the prior (declared tier and
    specialities; '-' when the store has no policy to read it from) and the evidence by source."""
    q = row.get("quality") or {}
    evidence = q.get("evidence") or {}
    return [_num(q.get("estimate"), ".3f"), _num(q.get("prior"), ".2f"), _num(evidence.get("signal"), ".0f"),
            _num(evidence.get("feedback"), ".0f"), _num(evidence.get("judge"), ".0f")]


def table(stats: dict) -> str:
    """The stats as an aligned text table: a row per deployment, then a row per domain."""
    def cells(dep, dom, r, breaker):
        return [dep, dom, str(r["count"]), f"{r['pulls']:.2f}", f"{r['mean_reward']:.3f}", f"{r['alpha']:.2f}",
                f"{r['beta']:.2f}", f"{r['avg_latency']:.3f}", f"{r['error_rate']:.3f}", *quality_cells(r), breaker]

    rows = []
    for dep, row in stats.items():
        rows.append(cells(dep, "(all)", row, row["breaker"]))
        for dom, r in sorted(row.get("domains", {}).items()):
            rows.append(cells("", dom, r, ""))
    if not rows:
        return "nothing learned yet"
    widths = [max(len(c), *(len(r[k]) for r in rows)) for k, c in enumerate(COLUMNS)]
    left = {0, 1, len(COLUMNS) - 1}

    def line(values):
        return "  ".join(v.ljust(w) if k in left else v.rjust(w) for k, (v, w) in enumerate(zip(values, widths))).rstrip()

    return "\n".join([line(COLUMNS), line(["-" * w for w in widths]), *map(line, rows)])


def contextual_table(models) -> str:
    """The contextual strategy's models, a row per deployment: the outcomes learned (exact
    count), the feature slots learned, the tick of the last update ('' without models)."""
    if models is None or not len(models):
        return ""
    rows = [[dep, f"{models.count[k]:.0f}", str(int((models.dp[:, k] != 0).sum())), f"{models.tick[k]:.0f}"]
            for dep, k in sorted(models.ids.items())]
    return aligned(["contextual model", "outcomes", "slots learned", "tick"], rows)


def aligned(head: list, rows: list) -> str:
    """A text table: the first column left-aligned, the others right-aligned."""
    widths = [max(len(h), *(len(r[j]) for r in rows)) for j, h in enumerate(head)]

    def line(values):
        return "  ".join(v.ljust(w) if j == 0 else v.rjust(w) for j, (v, w) in enumerate(zip(values, widths)))

    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)])


def pacing_table(policy, paces: dict) -> str:
    """Per alias with a spend target (or a pacing record), a row: the target, the realised spend
    per 1,000 requests (over the last 1,000 calls), the multiplier of the cost weight and its
    bound, the calls counted and their total cost ('' when there is none)."""
    from ..pacing import rule_of

    rules = {name: rule_of(a.budget) for name, a in policy.aliases.items()}
    names = sorted({n for n, r in rules.items() if r is not None} | set(paces))
    if not names:
        return ""
    rows = []
    for name in names:
        rule, rec = rules.get(name), paces.get(name)
        bounds = ""
        if rule is not None:  # the maximum; a floor below 0 too
            floor = f"{rule.min_multiplier:g}.." if rule.min_multiplier else ""
            bounds = f" / {floor}{rule.max_multiplier:g}"
        rows.append([name, f"{rule.target_usd_per_1k:g}" if rule else "(none)",
                     f"{rec['spend_per_1k']:.4f}" if rec else "-",
                     (f"{rec['multiplier']:.3f}" if rec else "1.000") + bounds,
                     f"{rec['count']:.0f}" if rec else "0", f"{rec['spend_usd']:.6f}" if rec else "0"])
    return aligned(["spend target", "target $/1k", "spend $/1k", "multiplier / max", "calls", "spent $"], rows)


def run(args) -> int:
    from ..policy import PolicyError, load_policy

    if args.url:
        return _run_live(args)
    try:
        return asyncio.run(_run(args, load_policy(args.policy)))
    except PolicyError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:  # an unreadable snapshot, a malformed Redis URL
        print(f"aisia stats: {exc}", file=sys.stderr)
        return 2


def _run_live(args) -> int:
    """The stats of the running proxy at --url, as its /admin/bandit/stats answers them."""
    from . import live

    if args.state:
        print("aisia stats: give --url (a running proxy) or --state (a snapshot), not both", file=sys.stderr)
        return 2
    try:
        for dep in args.reset or ():
            live.reset(args.url, args.key, dep)
            print(f"reset {dep}", file=sys.stderr)
        stats = live.fetch(args.url, args.key)
    except live.LiveError as exc:
        print(f"aisia stats: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(stats, indent=2) if args.json else table(stats))
    return 0


async def _run(args, policy) -> int:
    from ..state import open_store
    from ..state.memory import MemoryState

    cfg = policy.state
    if cfg.backend == "memory":
        path = args.state or cfg.snapshot_path
        if not path:
            print("aisia stats: the memory store keeps nothing between processes; give --url URL (a running "
                  "proxy), --state FILE (a snapshot) or set state.snapshot_path", file=sys.stderr)
            return 2
        store = MemoryState(snapshot_path=path)
        await store.start()
    else:
        store = open_store(policy)
        await store.start()
        if not store.connected:
            await store.aclose()
            print(f"aisia stats: Redis at {store.shown_url} is unreachable", file=sys.stderr)
            return 1
    for dep in args.reset or ():
        known = dep in store.stats()
        store.reset(dep)
        print(f"reset {dep}" + ("" if known else " (nothing was stored for it)"), file=sys.stderr)
    stats = store.stats()
    if args.reset:
        await store.aclose()  # the Redis store writes the resets; the memory store its snapshot
    elif cfg.backend == "redis":
        await store.aclose()
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        print(table(stats))
        models = contextual_table(getattr(store, "contextual", None))  # the Redis store read them at start
        if models:
            print()
            print(models)
        paced = pacing_table(policy, store.pacing())
        if paced:
            print()
            print(paced)
    return 0
