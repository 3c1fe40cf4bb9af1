"""benchmarks/slow_reader.py, whose figures docs/design.md#latency-and-answer-length quotes: a short
run through a real proxy measures what it says (each stream's size, the client's time, the
latency the plugin measured, how long the client held it, whether it taught)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

pytestmark = pytest.mark.proxy


def test_a_short_run_measures_each_stream_at_once_and_read_slowly():
    import slow_reader

    rows = slow_reader.measure([300], read_kib_per_s=100.0)
    assert [r["tokens"] for r in rows] == [300]
    row = rows[0]
    # 300 words as LiteLLM's chunks: some 60 KiB, about the same whichever way it is read (the
    # chunks' ids and times may differ in length).
    assert 30 < row["kib"] < 120 and row["slowly"]["kib"] == pytest.approx(row["kib"], rel=0.02)
    # Read at 100 KiB/s, 4 KiB at a time: the client takes at least its size over the pace.
    assert row["slowly"]["client_s"] >= row["kib"] / 100.0 * 0.9
    # The plugin measured both calls, no longer than the client waited for them; 60 KiB fit the
    # buffers, so neither was held back by its reading, and both taught their latency.
    for way in ("at_once", "slowly"):
        assert 0 < row[way]["measured_s"] <= row[way]["client_s"] + 0.05
        assert row[way]["held_s"] is not None and row[way]["held_s"] < 0.5 * row[way]["measured_s"]
        assert row[way]["learned"] is True
