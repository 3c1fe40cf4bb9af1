"""What a client reading a stream slowly does to a deployment's measured latency, through a real proxy.

    .venv/bin/python benchmarks/slow_reader.py [--tokens 1000,10000,30000] [--read-kib-per-s 40]
                                               [--no-write]

A stream's time, as LiteLLM reports it to the plugin, runs to its last chunk, and a client that
reads slowly can hold the chunks back once the buffers between the proxy and the client (the
server's, the sockets') are full: the answer's time then grows with the client's reading, which
the client chooses (docs/design.md#latency-and-answer-length, docs/security.md#tenants). This
measures from what size on. One simulated upstream over HTTP (20 ms, then the answer's words as
fast as it can write them) behind a real proxy with the plugin; per answer length, a stream read
at once and the same stream read at `--read-kib-per-s` (4 KiB at a time, a pause after each),
with the ``httpx`` client over loopback. Per stream: its size, the client's time, the latency the
plugin measured for the call (its explain log's outcome), how much of it the proxy waited on the
client (the hold, aisia_plugin/litellm/streams.py) and whether the stream then taught its latency
(docs/design.md#a-stream-its-client-holds) and, for the slow read, what the reading added to it. Writes benchmarks/results/slow_reader.{json,md}. Loopback's buffers are the kernel's
(they grow with the connection); over a network, the path's buffers add to them."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import bench  # first: LiteLLM offline, the repository importable
import httpx

from aisia_plugin.demo.proxy import deployment, start_proxy
from aisia_plugin.demo.report import explained_decisions
from aisia_plugin.demo.upstream import start_upstreams, stop_upstreams

ALIAS = "bench/one"
POLICY = f"""\
version: 1
defaults: false
aliases:
  {ALIAS}:
    description: the one deployment
    strategy: ucb1
    candidates: {{models: [upstream]}}
"""
CHUNK = 4096  # bytes the client reads at a time


def words_asked(name: str, messages: list) -> str:
    """An answer of as many words (a token each) as the prompt's last word says."""
    return " ".join(f"w{k}" for k in range(int(str(messages[-1]["content"]).split()[-1])))


def explained_outcome(proxy, request_id: str, limit_s: float = 60.0) -> dict:
    """The request's outcome as the plugin explains it (learned after the response, in the
    background): the latency it measured, how long the client held the stream, whether it taught."""
    deadline = time.monotonic() + limit_s
    while True:
        rows = [e for e in explained_decisions(proxy) if e["request_id"] == request_id and e.get("outcome")]
        if rows:
            return rows[-1]["outcome"]
        if time.monotonic() > deadline:
            raise SystemExit(f"slow_reader: no outcome for {request_id} after {limit_s:.0f} s")
        time.sleep(0.2)


def stream(proxy, tokens: int, pause_s: float) -> dict:
    body = {"model": ALIAS, "messages": [{"role": "user", "content": f"words {tokens}"}], "stream": True}
    started, size = time.monotonic(), 0
    with httpx.stream("POST", proxy.base_url + "/chat/completions", json=body, timeout=900,
                      headers={"Authorization": f"Bearer {proxy.master_key}"}) as r:
        if r.status_code != 200:
            raise SystemExit(f"slow_reader: the proxy answered {r.status_code}: {r.read()[:300]!r}")
        for chunk in r.iter_raw(CHUNK):
            size += len(chunk)
            if pause_s:
                time.sleep(pause_s)
        request_id = r.headers["x-aisia-request-id"]
    wall = time.monotonic() - started
    outcome = explained_outcome(proxy, request_id)
    return {"kib": size / 1024, "client_s": wall, "measured_s": float(outcome["latency_s"]),
            "held_s": outcome.get("client_held_s"), "learned": outcome.get("latency_learned")}


def measure(lengths: list[int], read_kib_per_s: float) -> list[dict]:
    """Per answer length, its stream read at once and read at `read_kib_per_s`, on a new proxy."""
    with tempfile.TemporaryDirectory(prefix="aisia-slow-reader-") as folder:
        return _measure(Path(folder), lengths, read_kib_per_s)


def _measure(work: Path, lengths: list[int], read_kib_per_s: float) -> list[dict]:
    pause = CHUNK / 1024 / read_kib_per_s
    (work / "policy.yaml").write_text(POLICY)
    upstreams = start_upstreams([{"name": "upstream", "latency_ms": 20, "responder": words_asked}])
    config = {"model_list": [deployment("upstream", upstreams[0])],
              "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin"], "request_timeout": 900}}
    bench.progress("starting a proxy")
    proxy = start_proxy(config, work, env={"AISIA_POLICY": str(work / "policy.yaml")})
    rows = []
    try:
        stream(proxy, 10, 0.0)  # the connections set up
        for n in lengths:
            bench.progress(f"{n} tokens read at once")
            fast = stream(proxy, n, 0.0)
            bench.progress(f"{n} tokens read at {read_kib_per_s:g} KiB/s (about {fast['kib'] / read_kib_per_s:.0f} s)")
            slow = stream(proxy, n, pause)
            rows.append({"tokens": n, "kib": fast["kib"], "at_once": fast, "slowly": slow,
                         "added_s": slow["measured_s"] - fast["measured_s"]})
            print(f"{n:>7} tokens, {fast['kib']:>6.0f} KiB: measured {fast['measured_s']:.2f} s read at once, "
                  f"{slow['measured_s']:.2f} s read in {slow['client_s']:.0f} s (held {_held(slow)}, "
                  f"{_taught(slow)}); the reading added {rows[-1]['added_s']:+.2f} s", flush=True)
    finally:
        proxy.stop()
        stop_upstreams(upstreams)
    return rows


def _held(way: dict) -> str:
    return "-" if way.get("held_s") is None else f"{way['held_s']:.2f} s"


def _taught(way: dict) -> str:
    return {True: "taught", False: "not taught"}.get(way.get("learned"), "taught (not timed)")


def main(argv=None) -> int:
    a = bench.arguments(__doc__, argv, tokens=("1000,10000,30000", "answer lengths, comma-separated"),
                        read_kib_per_s=(40.0, "the slow reader's pace"), no_write=False)
    rows = measure([int(t) for t in a.tokens.split(",") if t.strip()], a.read_kib_per_s)
    report = {"conditions": bench.conditions(read_kib_per_s=a.read_kib_per_s, chunk_bytes=CHUNK,
                                             network="loopback"), "streams": rows}
    table = bench.md_table(["answer tokens", "stream KiB", "measured, read at once (s)", "held, at once",
                            "client's time, slow (s)", "measured, read slowly (s)", "added by the reading (s)",
                            "held, slowly", "read slowly, its latency"],
                           [[f"{r['tokens']:,}", f"{r['kib']:,.0f}", f"{r['at_once']['measured_s']:.2f}",
                             _held(r["at_once"]), f"{r['slowly']['client_s']:.0f}", f"{r['slowly']['measured_s']:.2f}",
                             f"{r['added_s']:+.2f}", _held(r["slowly"]), _taught(r["slowly"])] for r in rows], "---:")
    md = "\n".join([f"# A slow reader and a stream's measured latency ({report['conditions']['date']})", "",
                    f"`benchmarks/slow_reader.py`: the slow reader takes {a.read_kib_per_s:g} KiB/s, {CHUNK} bytes at a "
                    f"time, over loopback; LiteLLM {report['conditions']['litellm']}, load "
                    f"{report['conditions']['load_average_1_5_15']}. Measured: the call's latency as the plugin "
                    "measured it (its explain log's outcome: LiteLLM's start of the call to its last chunk); held: "
                    "how much of it the proxy waited on the client's reading, and whether the stream then taught "
                    "its latency (docs/design.md#a-stream-its-client-holds). "
                    "Client and proxy share the machine's cores: a slow reader leaves the proxy more of them, "
                    "so a stream the buffers hold whole can be measured faster read slowly.", "", *table, ""])
    if not a.no_write:
        bench.write_results("slow_reader", report, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
