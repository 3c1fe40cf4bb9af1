"""Formatting replay results: text tables, JSON-ready dicts, comparisons, sweeps, the plot, and
a progress bar."""

from __future__ import annotations

import math
import sys
import time
from typing import Optional, Sequence

from .quality import format_measures, measures
from .runner import SPEND_WINDOW, Figures, ReplayResult, SweepResult

# (key, header, format) of the figure columns in the text tables
COLUMNS = [
    ("mean_score", "mean score", "{:.4f}"),
    ("total_cost_usd", "total cost $", "{:.6f}"),
    ("p50_latency_ms", "p50 ms", "{:.0f}"),
    ("p95_latency_ms", "p95 ms", "{:.0f}"),
    ("errors", "errors", "{:d}"),
    ("regret", "regret", "{:.3f}"),
]

COMPARED = ["mean_score", "total_cost_usd", "p50_latency_ms", "p95_latency_ms", "errors", "failovers", "regret", "mean_regret"]


def jsonable(o):
    """Non-finite floats become null: JSON has no infinity."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [jsonable(v) for v in o]
    return o


def _cell(v, fmt: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not math.isfinite(v):
        return "inf"
    return fmt.format(v)


def _table(rows: Sequence[tuple[str, Figures]], first_header: str = "") -> list[str]:
    name_w = max([len(first_header)] + [len(n) for n, _ in rows])
    cells = [[_cell(getattr(f, k), fmt) for k, _, fmt in COLUMNS] for _, f in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, (_, h, _) in enumerate(COLUMNS)]
    lines = ["  ".join([first_header.ljust(name_w)] + [h.rjust(w) for (_, h, _), w in zip(COLUMNS, widths)])]
    for (name, _), r in zip(rows, cells):
        lines.append("  ".join([name.ljust(name_w)] + [c.rjust(w) for c, w in zip(r, widths)]))
    return lines


def _calls_line(f: Figures) -> str:
    calls = ", ".join(f"{n} {c}" for n, c in sorted(f.calls.items(), key=lambda kv: (-kv[1], kv[0]))) or "none"
    return f"calls per candidate: {calls}; failovers {f.failovers}"


def baseline_rows(result_baselines) -> list[tuple[str, Figures]]:
    rows = [("oracle", result_baselines.oracle), ("uniform random", result_baselines.uniform)]
    for name, f in result_baselines.fixed.items():
        label = f"fixed {name}" + (f" ({f.missing} missing)" if f.missing else "")
        rows.append((label, f))
    return rows


def format_replay(result: ReplayResult, title: str = "") -> str:
    head = title or f"alias {result.alias} (strategy {result.strategy}): {result.requests} requests, seed {result.seed}"
    lines = [head, ""]
    lines += _table([("router", result.router)] + baseline_rows(result.baselines))
    lines += ["", "router " + _calls_line(result.router)]
    r, o = result.router, result.baselines.oracle
    lines.append(f"regret against the oracle: {_cell(r.regret, '{:.3f}')} total, {_cell(r.mean_regret, '{:.4f}')} per request "
                 f"(router {r.mean_score:.4f} vs oracle {o.mean_score:.4f} mean score)")
    lines += [""] + format_measures(replay_measures(result))
    lines += format_first(result.first)
    return "\n".join(lines)


def format_first(first: Optional[dict]) -> list[str]:
    """The first requests' line(s) of a replay (runner.first_requests), none without them."""
    if not first:
        return []
    n = first["requests"]
    out = []
    for name, r in first["runs"].items():
        out.append(f"  first {n} requests, {name}: mean score {r['mean_score']:.4f}, ${r['cost_per_request_usd']:.6f} per "
                   f"request, gain over mixing {r['gain_over_mixing']:+.4f} (oracle {first['oracle_gain_over_mixing']:+.4f}; "
                   f"the frontier of the fixed candidates on those requests)")
    return out


def replay_measures(result: ReplayResult) -> dict:
    """Gain over mixing (and CPT/APGR for two candidates) of one replay (replay/quality.py)."""
    return measures(result.baselines, [result.router])


def sweep_measures(result: SweepResult) -> dict:
    """The same over every swept run (CPT/APGR along the sweep's curve)."""
    return measures(result.baselines, [p.figures for p in result.points])


def replay_dict(result: ReplayResult, **extra) -> dict:
    return jsonable({**extra, **result.as_dict(), "quality": replay_measures(result)})


# -- compare -----------------------------------------------------------------------------------
def _delta(a, b):
    if a is None or b is None:
        return None
    return b - a


def compare_dict(base: ReplayResult, other: ReplayResult, *, base_name: str = "base", other_name: str = "other") -> dict:
    a, b = base.router.as_dict(), other.router.as_dict()
    delta = {k: _delta(a[k], b[k]) for k in COMPARED}
    names = sorted(set(a["calls"]) | set(b["calls"]))
    delta["calls"] = {n: b["calls"].get(n, 0) - a["calls"].get(n, 0) for n in names}
    return jsonable({
        "alias": base.alias,
        "requests": base.requests,
        "seed": base.seed,
        base_name: {**base.as_dict()},
        other_name: {**other.as_dict()},
        "delta": delta,
    })


def _signed(v, fmt: str) -> str:
    if v is None:
        return "-"
    s = fmt.format(v)
    return s if s.startswith("-") else "+" + s


def format_compare(base: ReplayResult, other: ReplayResult, *, base_label: str, other_label: str) -> str:
    a, b = base.router, other.router
    rows = [
        ("mean score", "mean_score", "{:.4f}"),
        ("total cost $", "total_cost_usd", "{:.6f}"),
        ("p50 latency ms", "p50_latency_ms", "{:.0f}"),
        ("p95 latency ms", "p95_latency_ms", "{:.0f}"),
        ("errors", "errors", "{:d}"),
        ("failovers", "failovers", "{:d}"),
        ("regret", "regret", "{:.3f}"),
    ]
    names = sorted(set(a.calls) | set(b.calls))
    table = [(label, _cell(getattr(a, k), fmt), _cell(getattr(b, k), fmt), _signed(_delta(getattr(a, k), getattr(b, k)), fmt))
             for label, k, fmt in rows]
    table += [(f"calls {n}", str(a.calls.get(n, 0)), str(b.calls.get(n, 0)), _signed(b.calls.get(n, 0) - a.calls.get(n, 0), "{:d}"))
              for n in names]
    header = ("", "base", "other", "delta")
    widths = [max(len(r[i]) for r in [header] + table) for i in range(4)]
    lines = [f"alias {base.alias}: {base.requests} requests, seed {base.seed}",
             f"base:  {base_label} (strategy {base.strategy})",
             f"other: {other_label} (strategy {other.strategy})", ""]
    lines.append("  ".join([header[0].ljust(widths[0])] + [h.rjust(w) for h, w in zip(header[1:], widths[1:])]))
    for r in table:
        lines.append("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]))
    if base.baselines.candidates != other.baselines.candidates:
        lines += ["", "note: the two policies' alias selects different candidates; each regret is against its own oracle"]
    lines += ["", f"oracle mean score {base.baselines.oracle.mean_score:.4f}, total cost ${base.baselines.oracle.total_cost_usd:.6f}"]
    return "\n".join(lines)


# -- sweep -------------------------------------------------------------------------------------
def format_sweep(result: SweepResult) -> str:
    lines = [f"alias {result.alias}: sweep of {result.param}, {result.requests} requests, seed {result.seed}", ""]
    rows = [(f"{result.param}={p.value:g}", p.figures) for p in result.points]
    lines += _table(rows + baseline_rows(result.baselines))
    lines += [""] + format_measures(sweep_measures(result), sweep=True)
    if any(p.spend for p in result.points):
        lines += ["", f"spend per 1,000 requests against the target (windows of {SPEND_WINDOW} requests from request "
                      f"{SPEND_WINDOW}; the multiplier's shares after the first {SPEND_WINDOW}):"]
        lines += [f"  {p.value:g}: " + format_spend(p.spend) for p in result.points]
    return "\n".join(lines)


def format_spend(s: dict) -> str:
    """A run's spend_figures in one line."""
    w = s["windows"]
    parts = [f"spent {s['spend_per_1k']:.4f} ({s['whole_deviation']:+.1%}) over the run"]
    if w:
        parts += [f"{side} window {w[k]['spend_per_1k']:.4f} ({w[k]['deviation']:+.1%}) from request {w[k]['start']}"
                  for side, k in (("highest", "above"), ("lowest", "below"))]
    if s["at_floor"] is not None:
        parts.append(f"multiplier at {s['floor']:g} after {s['at_floor']:.0%}, at its maximum after {s['at_max']:.0%}, "
                     f"last {s['final_multiplier']:.3g}")
    return "; ".join(parts)


def sweep_dict(result: SweepResult, **extra) -> dict:
    return jsonable({**extra, **result.as_dict(), "quality": sweep_measures(result)})


def plot_sweep(result: SweepResult, path: str) -> None:
    """The quality-cost curve: mean score against total cost, one point per swept value, with
    every fixed candidate, uniform random and the oracle marked. Raises ImportError without
    matplotlib, OSError when the file cannot be written."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5.0))
    try:
        xs = [p.figures.total_cost_usd for p in result.points]
        ys = [p.figures.mean_score for p in result.points]
        ax.plot(xs, ys, "-o", color="tab:blue", label=f"router, {result.param} swept", zorder=3)
        for p, x, y in zip(result.points, xs, ys):
            ax.annotate(f"{p.value:g}", (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8, color="tab:blue")
        b = result.baselines
        fx = [f.total_cost_usd for f in b.fixed.values()]
        fy = [f.mean_score for f in b.fixed.values()]
        ax.scatter(fx, fy, marker="s", color="tab:gray", label="fixed candidates", zorder=2)
        for name, x, y in zip(b.fixed, fx, fy):
            ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, -10), fontsize=8, color="tab:gray")
        ax.scatter([b.uniform.total_cost_usd], [b.uniform.mean_score], marker="^", color="tab:orange",
                   label="uniform random", zorder=2)
        ax.scatter([b.oracle.total_cost_usd], [b.oracle.mean_score], marker="*", s=180, color="tab:red",
                   label="oracle", zorder=4)
        # What mixing the fixed candidates reaches at each cost: a router is only good above it.
        front = sweep_measures(result)["frontier"]
        hx = [p["total_cost_usd"] for p in front]
        hy = [p["mean_score"] for p in front]
        right = max([hx[-1], b.oracle.total_cost_usd, *xs, *fx])
        ax.plot(hx + [right], hy + [hy[-1]], "--", color="tab:gray", label="mixing the fixed candidates", zorder=1)
        ax.set_xlabel("total cost (USD)")
        ax.set_ylabel("mean score")
        ax.set_title(f"{result.alias}: quality vs cost ({result.requests} requests)")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


# -- progress ------------------------------------------------------------------------------------
class ProgressBar:
    """A one-line bar on a stream (stderr), redrawn at most ~10 times a second."""

    def __init__(self, label: str = "replay", stream=None, width: int = 30, min_interval_s: float = 0.1):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.min_interval_s = min_interval_s
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last < self.min_interval_s:
            return
        self._last = now
        frac = done / total if total else 1.0
        filled = int(round(frac * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        try:
            self.stream.write(f"\r{self.label} [{bar}] {done}/{total} {frac * 100:5.1f}%")
            if done >= total:
                self.stream.write("\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass
        self._drawn = True


def progress_factory(enabled: bool, stream=None):
    """label -> a progress callback (or None when disabled)."""
    def make(label: str) -> Optional[ProgressBar]:
        return ProgressBar(label, stream) if enabled else None

    return make
