"""The benchmark data: converters of the shared real data."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import convert_data  # noqa: E402
from aisia_plugin.replay import scenarios  # noqa: E402
from aisia_plugin.replay.trace import load_trace, write_records  # noqa: E402

DATA = convert_data.shared_data_dir()
needs_data = pytest.mark.skipif(not (DATA / convert_data.ROUTELLM_FILE).exists(), reason=f"no shared data in {DATA}")


def _check_record(r: dict, candidates: set[str]) -> None:
    assert isinstance(r["id"], str) and r["id"]
    assert r["messages"][0]["role"] == "user" and r["messages"][0]["content"].strip()
    assert set(r["outcomes"]) == candidates
    for o in r["outcomes"].values():
        if "error" not in o:
            assert 0.0 <= o["score"] <= 1.0
        assert o["cost_usd"] >= 0 and o["latency_ms"] > 0
        assert o["input_tokens"] >= 0 and o["output_tokens"] >= 0


@needs_data
def test_routellm_slice(tmp_path):
    recs = convert_data.convert_routellm(DATA)[:20]
    assert len(recs) == 20
    for r in recs:
        _check_record(r, {"mixtral-8x7b", "gpt-4-1106"})
        assert r["label"] == "math"
        for o in r["outcomes"].values():
            assert o["score"] in (0.0, 1.0)
        g = r["outcomes"]["gpt-4-1106"]
        assert g["cost_usd"] == pytest.approx((g["input_tokens"] * 10 + g["output_tokens"] * 30) / 1e6)
        m = r["outcomes"]["mixtral-8x7b"]
        assert m["cost_usd"] == pytest.approx((m["input_tokens"] + m["output_tokens"]) * 0.6 / 1e6)
        assert g["input_tokens"] == m["input_tokens"] == convert_data.estimate_tokens(r["messages"][0]["content"])
    # scores follow the CSV's True/False columns
    import csv

    csv.field_size_limit(1 << 30)
    with open(DATA / convert_data.ROUTELLM_FILE, newline="", encoding="utf-8") as fh:
        rows = [row for _, row in zip(range(20), csv.DictReader(fh))]
    for r, row in zip(recs, rows):
        assert r["messages"][0]["content"] == row["prompt"]
        assert r["outcomes"]["gpt-4-1106"]["score"] == (1.0 if row["gpt-4-1106-preview"] == "True" else 0.0)
    # the written file passes the replay's trace checks
    path = tmp_path / "t.jsonl"
    write_records(path, recs)
    assert len(load_trace(str(path))) == 20


@needs_data
def test_routerarena_join_and_labels(tmp_path):
    recs = convert_data.convert_routerarena(DATA)[:20]
    assert len(recs) == 20
    raw = {}
    for m in convert_data.ROUTERARENA_MODELS:
        with open(DATA / f"routerarena_{m}.jsonl", encoding="utf-8") as fh:
            raw[m] = {json.loads(line)["global_index"]: json.loads(line) for line in fh if line.strip()}
    for r in recs:
        _check_record(r, set(convert_data.ROUTERARENA_MODELS))
        gi = r["id"]
        # the same prompt for both models (the join on global_index)
        qs = {raw[m][gi]["question"] for m in convert_data.ROUTERARENA_MODELS}
        assert len(qs) == 1 and r["messages"][0]["content"] in qs
        assert r["label"] == gi.rsplit("_", 1)[0] and gi == f"{r['label']}_{gi.rsplit('_', 1)[1]}"
        for m in convert_data.ROUTERARENA_MODELS:
            src, o = raw[m][gi], r["outcomes"][m]
            assert o["score"] == pytest.approx(src["evaluation_result"]["score"])
            assert o["cost_usd"] == pytest.approx(src["evaluation_result"]["inference_cost"])
            assert o["input_tokens"] == src["token_usage"]["input_tokens"]
    path = tmp_path / "a.jsonl"
    write_records(path, recs)
    assert len(load_trace(str(path))) == 20


def test_real_traces_are_shuffled_by_a_fixed_seed():
    rows = [{"id": str(i)} for i in range(50)]
    a = convert_data.shuffled(rows, "x")
    assert a == convert_data.shuffled(rows, "x") and a != rows and sorted(a, key=lambda r: int(r["id"])) == rows
    assert convert_data.shuffled(rows, "y") != a


def test_the_benchmarks_page_quotes_the_committed_benchmark_results():
    """docs/benchmarks.md's results blocks are what `run_all.py` renders from benchmarks/results/*.json: a
    figure edited by hand, or a run whose page was not regenerated, fails here."""
    import run_all

    conditions = json.loads((run_all.RESULTS_DIR / "conditions.json").read_text())
    names = list(scenarios.SCENARIOS + scenarios.PROMPT_SCENARIOS) + ["routellm_gsm8k", "routerarena"]
    results = [json.loads((run_all.RESULTS_DIR / f"{n}.json").read_text())
               for n in names if (run_all.RESULTS_DIR / f"{n}.json").exists()]
    assert results, "no committed results"
    text = run_all.SUMMARY.read_text(encoding="utf-8")
    for name, lines in run_all.summary_blocks(results, conditions).items():
        begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
        block = text[text.index(begin):text.index(end) + len(end)]
        assert block == "\n".join([begin, *lines, end]), \
            f"docs/benchmarks.md {name} block is stale: run benchmarks/run_all.py --render-only"
