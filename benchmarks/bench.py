"""What every benchmark does, in one place, so that each script says only what it measures: where
things are (the repository, the shared real data read in place, the results), the machine's
conditions, the timing loops (warm-up, gc off, cells taking turns), percentiles, and the writing
of results (JSON, Markdown tables, a block of a docs page).

Each script imports it first (it sits beside them): LiteLLM is then kept offline (it downloads
nothing: cost map, blog posts...) and the repository and this folder are importable."""

from __future__ import annotations

import argparse
import csv
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Awaitable, Callable, Iterable, Sequence

for _flag in ("LITELLM_LOCAL_MODEL_COST_MAP", "LITELLM_LOCAL_BLOG_POSTS", "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS",
              "LITELLM_LOCAL_AUTOROUTER_PRESETS", "LITELLM_LOCAL_POLICY_TEMPLATES"):
    os.environ.setdefault(_flag, "True")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"  # generated traces and scratch files (gitignored)
RESULTS = HERE / "results"
TESTS = REPO / "tests"  # the fixtures some benchmarks reuse (redis-server, a delaying TCP proxy)
for _path in (str(HERE), str(REPO)):
    if _path not in sys.path:
        sys.path.insert(0, _path)


def arguments(doc: str, argv=None, **options) -> argparse.Namespace:
    """A script's command line, described by its docstring's first line: ``name=default`` or
    ``name=(default, help)`` per option ``--name-with-dashes``; a bool default is a flag, a list
    default an option that may be repeated, a type (``float``) an option of that type without a
    default (None), anything else an option of the default's type (a list default: the values given
    are added to it)."""
    ap = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    for name, spec in options.items():
        default, help_ = spec if isinstance(spec, tuple) else (spec, None)
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            ap.add_argument(flag, action="store_true", help=help_)
        elif isinstance(default, list):
            ap.add_argument(flag, action="append", default=list(default), help=help_)
        elif isinstance(default, type):
            ap.add_argument(flag, type=default, help=help_)
        else:
            ap.add_argument(flag, type=str if default is None else type(default), default=default, help=help_)
    return ap.parse_args(argv)


# -- the shared real data (../shared/data, or $AISIA_SHARED_DATA), never copied -------------------
def shared_data_dir() -> Path:
    env = os.environ.get("AISIA_SHARED_DATA")
    return Path(env) if env else (REPO / ".." / "shared" / "data").resolve()


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def read_csv(path: Path) -> list[dict]:
    csv.field_size_limit(1 << 30)
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def padded(prompts: list[str], total_bytes: int = 2048, step: int = 1, limit: int | None = None) -> list[str]:
    """Prompts (every ``step``-th, at most ``limit``) each padded to ``total_bytes`` UTF-8 bytes
    with the prompts that follow it: distinct real requests of one size."""
    out = []
    for i in range(0, len(prompts), step)[:limit]:
        text, j = prompts[i], i
        while len(text.encode()) < total_bytes:
            j = (j + 1) % len(prompts)
            text += "\n" + prompts[j]
        out.append(text.encode()[:total_bytes].decode("utf-8", "ignore"))
    return out


def dense_messages(total_bytes: int = 2048) -> list[dict]:
    """A system line and a keyword-dense coding request, exactly ``total_bytes`` UTF-8 bytes."""
    system = "You are a careful senior engineer. Answer precisely and show working code."
    para = ("I have a Python service that calls an HTTP API and parses the JSON response into dataclasses. "
            "Sometimes the function raises a KeyError deep inside the parser and the stack trace is hard "
            "to read. Can you help me debug it, suggest a cleaner class design, and write a pytest test "
            "that reproduces the failure with a fixture? Here is the relevant part of the code:\n"
            "def parse(payload):\n    items = payload['data']['items']\n    return [Item(**x) for x in items]\n")
    need = total_bytes - len(system.encode())
    return [{"role": "system", "content": system}, {"role": "user", "content": (para * (need // len(para) + 1))[:need]}]


# -- the machine ----------------------------------------------------------------------------------
def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def load_average() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def machine_speed_ms() -> float:
    """A fixed pure-Python workload's best time of five, in ms: how fast this machine runs Python
    right now (a shared VM's speed varies from run to run); compare timing runs by it."""
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000.0, 1)


def conditions(**extra) -> dict:
    """The machine and the software a run was measured on (the load: other jobs share it)."""
    return {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "platform": platform.platform(), "cpu_count": os.cpu_count(), "litellm": version("litellm"),
            "aisia_plugin": version("aisia_plugin"), "load_average_1_5_15": load_average(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **extra}


def _proc_stats() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, user + system CPU seconds so far), from Linux's /proc."""
    tick, out = os.sysconf("SC_CLK_TCK"), {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()  # after the name
            except OSError:
                continue
            out[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    return out


def process_tree(pid: int) -> list[int]:
    """A process and its descendants (a proxy, its workers and helpers)."""
    stats, todo, seen = _proc_stats(), [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += [c for c, (ppid, _) in stats.items() if ppid == p]
    return seen


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its descendants so far."""
    stats = _proc_stats()
    return sum(stats[p][1] for p in process_tree(pid) if p in stats)


def progress(text: str) -> None:
    """A progress line on stderr, with the time and the load (other jobs share the machine)."""
    print(f"[{time.strftime('%H:%M:%S')} load {load_average()[0]:.2f}] {text}", file=sys.stderr, flush=True)


# -- timing ---------------------------------------------------------------------------------------
@contextmanager
def gc_off():
    """No collection inside a timing loop (collected before it): the figures are the code's own."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def percentile(sorted_values: list, q: float):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def summarize(ns: Iterable[int]) -> dict:
    """Nanosecond samples as microsecond percentiles."""
    us = sorted(x / 1000.0 for x in ns)
    return {"p50_us": round(percentile(us, 0.5), 2), "p90_us": round(percentile(us, 0.9), 2),
            "p99_us": round(percentile(us, 0.99), 2), "mean_us": round(statistics.fmean(us), 2),
            "max_us": round(us[-1], 2), "n": len(us)}


def time_calls(fn: Callable[[], object], calls: int, warm: int = 200) -> dict:
    """``fn()`` timed one call at a time, ``calls`` times, after ``warm`` untimed calls."""
    for _ in range(warm):
        fn()
    pc, out = time.perf_counter_ns, [0] * calls
    with gc_off():
        for i in range(calls):
            t0 = pc()
            fn()
            out[i] = pc() - t0
    return summarize(out)


async def atime_calls(step: Callable[[], Awaitable], calls: int, warm: int = 0, between=None) -> list[int]:
    """``await step()`` timed alone ``calls`` times after ``warm`` untimed calls, ``await between()``
    untimed before each: the nanoseconds of each call (one running event loop throughout)."""
    for _ in range(warm):
        await step()
    pc, out = time.perf_counter_ns, []
    with gc_off():
        for _ in range(calls):
            if between is not None:
                await between()
            t0 = pc()
            await step()
            out.append(pc() - t0)
    return out


def interleaved(cells: dict, calls: int, rounds: int = 6) -> dict:
    """Every cell's ``step()`` (one call, returning the nanoseconds it timed) ``calls`` times, the
    cells taking turns ``calls // rounds`` calls at a time after their warm-up: a slow spell of the
    shared machine falls on every cell alike. ``cells``: name -> (step, warm-up calls)."""
    for step, warm in cells.values():
        for _ in range(warm):
            step()
    samples = {k: [] for k in cells}
    with gc_off():
        for _ in range(rounds):
            for k, (step, _) in cells.items():
                add = samples[k].append
                for _ in range(max(1, calls // rounds)):
                    add(step())
    return {k: summarize(v) for k, v in samples.items()}


# -- results --------------------------------------------------------------------------------------
def md_table(head: list[str], rows: Iterable[list], align: str | Sequence[str] = "---") -> list[str]:
    """A Markdown table (cells formatted by the caller); ``align`` for the columns after the first:
    one for all (``"---:"``: right), or one per column."""
    aligns = [align] * (len(head) - 1) if isinstance(align, str) else list(align)
    return ["| " + " | ".join(head) + " |", "|---|" + "".join(f"{a}|" for a in aligns)] + [
        "| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def write_results(name: str, report: dict, md: str | None = None, out: Path = RESULTS, indent: int = 2) -> None:
    """results/<name>.json and, given the Markdown, results/<name>.md."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=indent) + "\n", encoding="utf-8")
    if md is not None:
        (out / f"{name}.md").write_text(md, encoding="utf-8")


def replace_blocks(path: Path, blocks: dict[str, list[str]]) -> bool:
    """Each block's lines between its markers ``<!-- NAME -->`` and ``<!-- /NAME -->`` in ``path``,
    the hand-written text around them left as it is; False, and a message, when a block's markers
    are missing (that block is not updated)."""
    text = old = path.read_text(encoding="utf-8")
    found = True
    for name, lines in blocks.items():
        begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
        start, stop = text.find(begin), text.find(end)
        if start < 0 or stop < start:
            print(f"{path.name}: no {begin} ... {end} block; not updated", file=sys.stderr)
            found = False
            continue
        text = text[:start] + "\n".join([begin, *lines, end]) + text[stop + len(end):]
    if text != old:
        path.write_text(text, encoding="utf-8")
    return found


# -- proxy and timing scripts ---------------------------------------------------------------------
def per_call(stats, n: int) -> dict:
    """A profile's functions (a ``pstats.Stats``) -> (calls, own us, inclusive us) per one of the
    ``n`` requests or calls it ran."""
    return {k: (v[1] / n, 1e6 * v[2] / n, 1e6 * v[3] / n) for k, v in stats.stats.items()}


def function_name(key: tuple) -> str:
    """A profile's (file, line, function) as ``file:line(function)``, the file from its package on."""
    file, line, func = key
    for marker in ("site-packages/", "aisia_plugin/", "lib/python3"):
        if marker in file:
            file = (marker if marker == "aisia_plugin/" else "") + file.split(marker, 1)[1]
            break
    return f"{file}:{line}({func})"
