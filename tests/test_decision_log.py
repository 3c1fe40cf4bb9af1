"""The decision log: one JSON line per decision and per outcome, no prompt text unless asked,
rotation by size, and an unwritable path that never raises (one warning, the error callback)."""

from __future__ import annotations

import json
import logging
import os
import time

from aisia_plugin.decision import CandidateScore, Decision
from aisia_plugin.decision_log import DecisionLog
from aisia_plugin.features import RequestFeatures

SECRET = "zebra-marker-4417"


def _decision():
    return Decision("a-1", "openai/x", "ucb1", "best mean reward", 2, 0.8,
                    [CandidateScore("a-1", 0.8), CandidateScore("b-2", 0.5), CandidateScore("c-3", excluded="circuit OPEN")],
                    probability=1.0, alias="auto", domain="coding", task_type="coding")


def test_lines_carry_the_decision_and_the_outcome_without_prompt_text(tmp_path):
    path = tmp_path / "decisions.jsonl"
    dl = DecisionLog(str(path), clock=lambda: 12.5)
    feats = RequestFeatures(task_type="coding", has_code=True, text=f"write {SECRET}", input_tokens=7)
    dl.decision("req-1", _decision(), features=feats, prompt=f"write {SECRET}")
    dl.outcome("req-1", "a-1", alias="auto", success=True, status_code=200, latency_s=0.25, cost_usd=0.001,
               reward=0.9, response=f"done {SECRET}")
    dl.close()
    text = path.read_text()
    assert SECRET not in text
    dec, out = [json.loads(line) for line in text.splitlines()]
    assert dec["type"] == "decision" and dec["request_id"] == "req-1" and dec["deployment"] == "a-1"
    assert dec["probability"] == 1.0 and dec["candidates"] == ["a-1", "b-2"] and dec["excluded"] == {"c-3": "circuit OPEN"}
    assert dec["features"]["task_type"] == "coding" and dec["features"]["input_tokens"] == 7 and dec["ts"] == 12.5
    assert out["type"] == "outcome" and out["reward"] == 0.9 and out["latency_s"] == 0.25 and out["success"] is True


def test_log_prompts_switch_writes_the_text(tmp_path):
    path = tmp_path / "d.jsonl"
    dl = DecisionLog(str(path), log_prompts=True)
    dl.decision("r", _decision(), prompt=f"hello {SECRET}")
    dl.close()
    assert json.loads(path.read_text())["prompt"] == f"hello {SECRET}"


def test_rotation_by_size_keeps_the_backups(tmp_path):
    path = tmp_path / "d.jsonl"
    dl = DecisionLog(str(path), max_bytes=2048, backups=2)
    for i in range(60):
        dl.outcome(f"r{i}", "a-1", alias="auto", success=True)
    dl.close()
    names = sorted(os.listdir(tmp_path))
    assert names == ["d.jsonl", "d.jsonl.1", "d.jsonl.2"]
    for name in names:
        size = (tmp_path / name).stat().st_size
        assert 0 < size <= 2048
        for line in (tmp_path / name).read_text().splitlines():
            json.loads(line)
    # The newest line is in the live file.
    assert json.loads((tmp_path / "d.jsonl").read_text().splitlines()[-1])["request_id"] == "r59"


def test_an_unwritable_path_warns_once_and_never_raises(tmp_path, caplog):
    errors = []
    dl = DecisionLog(str(tmp_path / "missing-dir" / "d.jsonl"), on_error=lambda: errors.append(1))
    with caplog.at_level(logging.WARNING, logger="aisia_plugin.decision_log"):
        for i in range(5):
            dl.decision(f"r{i}", _decision())
    assert len(errors) == 5
    assert len([r for r in caplog.records if "cannot be written" in r.getMessage()]) == 1
    (tmp_path / "missing-dir").mkdir()
    dl.outcome("r9", "a-1", alias="auto", success=True)
    dl.close()
    assert json.loads((tmp_path / "missing-dir" / "d.jsonl").read_text())["request_id"] == "r9"


def test_stdout(capsys):
    DecisionLog("-").outcome("r1", "a-1", alias="auto", success=False, status_code=503)
    assert json.loads(capsys.readouterr().out)["status"] == 503


def test_an_infinite_score_is_logged_as_null(tmp_path):
    # UCB1 scores a deployment it never tried +inf: the decision must still be logged (strict JSON).
    path = tmp_path / "d.jsonl"
    dl = DecisionLog(str(path))
    d = Decision("a-1", "openai/x", "ucb1", "a-1 has never been tried: explored first", 2, float("inf"),
                 [CandidateScore("a-1", float("inf")), CandidateScore("b-2", 0.5)], probability=1.0, alias="auto")
    dl.decision("req-inf", d)
    dl.outcome("req-inf", "a-1", alias="auto", success=True, latency_s=float("nan"), reward=1.0)
    dl.close()
    dec, out = [json.loads(line) for line in path.read_text().splitlines()]
    assert dec["request_id"] == "req-inf" and dec["deployment"] == "a-1" and dec["score"] is None
    assert dec["probability"] == 1.0 and dec["candidates"] == ["a-1", "b-2"]
    assert out["latency_s"] is None and out["reward"] == 1.0


def test_a_stalled_writer_bounds_the_queue_and_reports_the_dropped_lines(tmp_path, caplog):
    """The writer is held as a stalled disk would hold it (its file lock taken): past max_queued
    waiting lines, a line is dropped, counted and reported (a warning, the error callback); the
    queued ones are written in order once it is released."""
    errors, path = [], tmp_path / "d.jsonl"
    dl = DecisionLog(str(path), background=True, max_queued=5, on_error=lambda: errors.append(1))
    with caplog.at_level(logging.WARNING, logger="aisia_plugin.decision_log"):
        with dl._lock:
            dl.outcome("r0", "a-1", alias="auto", success=True)
            deadline = time.monotonic() + 10
            while dl._queue.qsize() and time.monotonic() < deadline:  # the writer took r0, and waits
                time.sleep(0.01)
            for i in range(1, 11):
                dl.outcome(f"r{i}", "a-1", alias="auto", success=True)
            assert dl.dropped == 5 and len(errors) == 5
        dl.flush()
        dl.outcome("r11", "a-1", alias="auto", success=True)
        dl.close()
    written = [json.loads(line)["request_id"] for line in path.read_text().splitlines()]
    assert written == ["r0", "r1", "r2", "r3", "r4", "r5", "r11"]
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if "lines are dropped until it catches up" in m]) == 1
    assert len([m for m in said if "caught up; 5 lines dropped" in m]) == 1


def test_exited_workers_files_are_retired_keeping_the_newest(tmp_path):
    """A per-process log (the proxy's workers) keeps, of the files of workers that have exited,
    the `backups` newest (their rotated backups counted alike) and removes the rest, when it
    opens and when it rotates; a live process's files are never touched."""
    import subprocess
    import sys

    exited = []
    for _ in range(3):  # pids of processes that have really exited
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        proc.wait()
        exited.append(proc.pid)
    live = os.getppid()
    path = str(tmp_path / "decisions.jsonl")
    files = {}
    for age, name in enumerate([f"decisions.{exited[0]}.jsonl", f"decisions.{exited[1]}.jsonl",
                                f"decisions.{exited[1]}.jsonl.1", f"decisions.{exited[2]}.jsonl",
                                f"decisions.{live}.jsonl", f"decisions.{live}.jsonl.1", "decisions.jsonl"]):
        f = tmp_path / name
        f.write_text("{}\n")
        os.utime(f, (1_000_000 - age * 100, 1_000_000 - age * 100))  # the first listed is the newest
        files[name] = f
    log = DecisionLog(path, per_process=True, backups=2, max_bytes=1024)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([f"decisions.{exited[0]}.jsonl", f"decisions.{exited[1]}.jsonl",
                           f"decisions.{live}.jsonl", f"decisions.{live}.jsonl.1", "decisions.jsonl"]), left

    # On rotation too: a worker that exited since is retired beyond the two kept.
    (tmp_path / f"decisions.{exited[2]}.jsonl").write_text("{}\n")  # newest now
    for i in range(40):
        log.outcome(f"r{i}", "a-1", alias="auto", success=True, status_code=200, latency_s=0.1, cost_usd=0.0,
                    reward=1.0)
    log.close()
    left = sorted(p.name for p in tmp_path.iterdir())
    assert f"decisions.{exited[2]}.jsonl" in left and f"decisions.{exited[0]}.jsonl" in left, left
    assert f"decisions.{exited[1]}.jsonl" not in left, left  # now the oldest of three
    assert f"decisions.{os.getpid()}.jsonl.1" in left, left  # it rotated
    assert f"decisions.{live}.jsonl" in left and f"decisions.{live}.jsonl.1" in left
