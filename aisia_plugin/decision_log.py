"""The decision log: one JSON line per decision and one per outcome, for audits and for offline
evaluation of another policy on the same traffic (``aisia replay --logged``); one per piece of
quality evidence recorded about an answer after it was served (a conversation signal, a judge's
grade, feedback), which that evaluation values the answer by.

No prompt or response text is written unless the operator turns ``log_prompts`` on. Writing never
fails a request: an unwritable path or a full disk is reported once (a warning, and the
``on_error`` callback, e.g. a metric) and the line is dropped. Rotation is by size: ``path`` is
renamed ``path.1`` (older ones shift up to ``backups``) once it would grow past ``max_bytes``.

In the proxy (``background=True``) a record is encoded on the caller's thread and written by a
writer thread, in batches with one flush each, so the event loop never waits on the disk; at most
``max_queued`` lines wait for it (a disk that stalls must not grow the proxy's memory without
bound): past that a line is dropped, counted, reported like a write error, and the count of the
dropped lines is logged when the writer catches up. With
several processes (``per_process=True``, the proxy's workers) each writes and rotates its own
file, ``decisions.<pid>.jsonl`` beside the configured ``decisions.jsonl``: no two processes ever
rename each other's file. ``logged_files`` finds them all again for ``aisia replay --logged``.
The files of workers that have exited (a restart, a crashed worker) are never written again: each
worker, when it opens its file and when it rotates it, keeps the ``backups`` newest of them (their
rotated backups counted alike) and removes the others (``retire_exited_workers``), so restarts do
not fill the disk. A worker is known dead by its pid on this machine: the directory of a
per-process log belongs to one host."""

from __future__ import annotations

import atexit
import glob
import json
import logging
import math
import os
import queue
import re
import sys
import threading
import time
from typing import Callable, Optional

from .schema_defaults import defaults_of

log = logging.getLogger("aisia_plugin.decision_log")
_DEFAULTS = defaults_of("DecisionLog")

FORMAT_VERSION = 1


def strict_json(value):
    """``value`` with every infinite or NaN float replaced by None: strict JSON has no such
    numbers, and UCB1 scores a deployment it never tried +inf (its decision would go unlogged;
    `aisia replay --logged --json` prints an estimate on no usable event as null)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def _parts(path: str) -> tuple[str, str, str]:
    """(directory, stem, extension with its dot) of a log path."""
    head, tail = os.path.split(path)
    stem, dot, ext = tail.rpartition(".") if "." in tail.lstrip(".") else (tail, "", "")
    return head, stem, dot + ext


def process_path(path: str, pid: Optional[int] = None) -> str:
    """The file one process of several writes for the configured `path`: its pid before the
    extension (``decisions.jsonl`` -> ``decisions.4242.jsonl``)."""
    head, stem, ext = _parts(path)
    return os.path.join(head, f"{stem}.{pid or os.getpid()}{ext}")


def logged_files(path: str) -> list[str]:
    """The decision log files a configured path stands for: a directory's ``*.jsonl`` files; a
    glob pattern's matches; else the file itself (when it exists) and the per-process files
    written beside it (``process_path``). Rotated backups (``.1``, ...) are not included."""
    if os.path.isdir(path):
        return sorted(glob.glob(os.path.join(glob.escape(path), "*.jsonl")))
    if glob.has_magic(path):
        return sorted(glob.glob(path))
    head, stem, ext = _parts(path)
    pattern = re.compile(re.escape(stem) + r"\.\d+" + re.escape(ext) + "$")
    try:
        siblings = sorted(n for n in os.listdir(head or ".") if pattern.match(n))
    except OSError:
        siblings = []
    return ([path] if os.path.isfile(path) else []) + [os.path.join(head, n) for n in siblings]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0  # another user's live process (or a number no pid can be: not ours)
    return True


def retire_exited_workers(path: str, keep: int, alive: Callable[[int], bool] = _pid_alive) -> list[str]:
    """Of the per-process files of the configured `path` (``process_path``, with their rotated
    backups) whose process has exited, keep the `keep` newest (by modification time) and remove
    the others; returns the removed paths. Files of live processes are never touched."""
    head, stem, ext = _parts(path)
    pattern = re.compile(re.escape(stem) + r"\.(\d+)" + re.escape(ext) + r"(?:\.\d+)?$")
    exited = []
    try:
        names = os.listdir(head or ".")
    except OSError:
        return []
    for name in names:
        m = pattern.match(name)
        if m is None or int(m.group(1)) == os.getpid() or alive(int(m.group(1))):
            continue
        full = os.path.join(head, name)
        try:
            exited.append((os.path.getmtime(full), full))
        except OSError:  # removed meanwhile by another worker doing the same
            continue
    exited.sort(reverse=True)
    removed = []
    for _, full in exited[max(0, keep):]:
        try:
            os.remove(full)
            removed.append(full)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("decision log: cannot remove %s, a file of an exited worker (%s)", full, exc)
    return removed


_STOP = object()


class DecisionLog:
    def __init__(self, path: Optional[str], *, max_bytes: int = _DEFAULTS["max_bytes"], backups: int = _DEFAULTS["backups"],
                 log_prompts: bool = False, clock: Callable[[], float] = time.time,
                 on_error: Optional[Callable[[], None]] = None, background: bool = False,
                 per_process: bool = False, max_queued: int = _DEFAULTS["max_queued"]):
        """``path`` None or "-" writes to standard output. `background`: written by a writer
        thread (``flush`` waits for it), at most `max_queued` lines waiting; `per_process`: this
        process's own file (``process_path``)."""
        self.configured_path = None if not per_process or path in (None, "", "-") else str(path)
        if self.configured_path is not None:
            path = process_path(self.configured_path)
        self.path = None if path in (None, "", "-") else str(path)
        self.max_bytes = max(1024, int(max_bytes))
        self.backups = max(0, int(backups))
        self._retire_exited()
        self.log_prompts = bool(log_prompts)
        self.clock = clock
        self.on_error = on_error
        self._lock = threading.Lock()
        self._fh = None
        self._size = 0
        self._failing = False
        self.max_queued = max(1, int(max_queued))
        self.dropped = 0  # lines dropped because the writer was max_queued lines behind
        self._dropping = False
        self._queue: Optional[queue.SimpleQueue] = None
        self._writer: Optional[threading.Thread] = None
        if background:
            self._queue = queue.SimpleQueue()
            self._writer = threading.Thread(target=self._drain, name="aisia-decision-log", daemon=True)
            self._writer.start()
            atexit.register(self.close)  # the lines still queued when the process ends

    # -- records -------------------------------------------------------------------------------
    def decision(self, request_id: str, decision, *, features=None, prompt: Optional[str] = None,
                 attempt: int = 0, ts: Optional[float] = None, prices: Optional[dict] = None) -> None:
        """`prices`: each candidate's USD per 1M tokens in/out as the proxy priced it (LiteLLM's
        prices first), so that ``aisia replay --logged`` prices them alike without the config."""
        rec = {
            "v": FORMAT_VERSION, "type": "decision", "ts": self.clock() if ts is None else ts,
            "request_id": request_id, "attempt": attempt,
            "alias": decision.alias, "domain": decision.domain, "task_type": decision.task_type,
            "strategy": decision.strategy, "deployment": decision.deployment_id, "model": decision.model,
            "probability": decision.probability, "score": decision.final_score, "refused": decision.refused,
            "reason": decision.reason,
            "candidates": [s.id for s in decision.scores if not s.excluded],
            "excluded": {s.id: s.excluded for s in decision.scores if s.excluded},
        }
        if prices:
            rec["prices"] = {dep: [float(p[0]), float(p[1])] for dep, p in prices.items() if dep in rec["candidates"]}
        if features is not None:
            rec["features"] = {k: getattr(features, k, None) for k in
                               ("task_type", "has_code", "length_bucket", "modality", "input_tokens", "has_tools")}
        if self.log_prompts and prompt is not None:
            rec["prompt"] = prompt
        self._write(rec)

    def outcome(self, request_id: str, deployment_id: str, *, alias: str, success: bool,
                status_code: Optional[int] = None, latency_s: Optional[float] = None, cost_usd: Optional[float] = None,
                reward: Optional[float] = None, attempt: int = 0, response: Optional[str] = None,
                ts: Optional[float] = None) -> None:
        """``ts``: when it was observed (default: now), for a record written after the fact."""
        rec = {"v": FORMAT_VERSION, "type": "outcome", "ts": self.clock() if ts is None else ts,
               "request_id": request_id, "attempt": attempt, "alias": alias, "deployment": deployment_id, "success": success,
               "status": status_code, "latency_s": latency_s, "cost_usd": cost_usd, "reward": reward}
        if self.log_prompts and response is not None:
            rec["response"] = response
        self._write(rec)

    def evidence(self, request_id: str, deployment_id: str, *, alias: Optional[str], domain: Optional[str],
                 source: str, value: float, weight: float, kind: Optional[str] = None,
                 language: Optional[str] = None, ts: Optional[float] = None) -> None:
        """Quality evidence about the answer `deployment_id` gave the request `request_id`, recorded
        after it (``Engine.record_quality``): its `source` (signal, judge, feedback), `value` in
        [0, 1] and `weight`; a signal's `kind` and `language`."""
        rec = {"v": FORMAT_VERSION, "type": "evidence", "ts": self.clock() if ts is None else ts,
               "request_id": request_id, "deployment": deployment_id, "alias": alias, "domain": domain,
               "source": source, "kind": kind, "language": language, "value": value, "weight": weight}
        self._write(rec)

    def local_first(self, request_id: str, *, alias: str, deployment_id: Optional[str], result: str,
                    confidence: Optional[dict] = None, escalation_request_id: Optional[str] = None,
                    escalated_to: Optional[str] = None, ts: Optional[float] = None) -> None:
        """What became of a local-first call's local answer (docs/local-first.md): `result` (kept,
        escalated, escalation_failed, not_local), its confidence and parts, the escalation's own
        request id (its decision and outcome records) and the cloud deployment that answered."""
        rec = {"v": FORMAT_VERSION, "type": "local_first", "ts": self.clock() if ts is None else ts,
               "request_id": request_id, "alias": alias, "deployment": deployment_id, "result": result,
               "confidence": confidence, "escalation_request_id": escalation_request_id,
               "escalated_to": escalated_to}
        self._write(rec)

    # -- writing -------------------------------------------------------------------------------
    def _write(self, rec: dict) -> None:
        line = json.dumps(strict_json(rec), ensure_ascii=False, allow_nan=False, default=str) + "\n"
        if self._queue is not None:
            if self._queue.qsize() < self.max_queued:
                self._queue.put(line)
            else:
                self._drop()
        else:
            self._write_lines([line])

    def _drain(self) -> None:
        """The writer thread: whatever is queued, written as one batch with one flush."""
        while True:
            first = self._queue.get()
            batch, stop, done = [], False, []
            for item in self._more(first):
                if item is _STOP:
                    stop = True
                elif isinstance(item, threading.Event):
                    done.append(item)
                else:
                    batch.append(item)
            if batch:
                self._write_lines(batch)
            if self._dropping and self._queue.qsize() < self.max_queued:
                self._dropping = False
                log.warning("decision log %s: the writer caught up; %d lines dropped so far while it was "
                            "%d lines behind", self.path or "<stdout>", self.dropped, self.max_queued)
            for event in done:
                event.set()
            if stop:
                return

    def _more(self, first):
        yield first
        for _ in range(10000):
            try:
                yield self._queue.get_nowait()
            except queue.Empty:
                return

    def _write_lines(self, lines: list[str]) -> None:
        with self._lock:
            try:
                if self.path is None:
                    sys.stdout.write("".join(lines))
                    sys.stdout.flush()
                    return
                for line in lines:
                    data = line.encode("utf-8")
                    if self._fh is None:
                        self._open()
                    elif self._size + len(data) > self.max_bytes:
                        self._fh.flush()
                        self._rotate()
                    self._fh.write(data)
                    self._size += len(data)
                self._fh.flush()
                if self._failing:
                    log.warning("decision log %s is writable again", self.path)
                    self._failing = False
            except (OSError, ValueError) as exc:
                self._fail(exc)

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until every record logged so far is written (a background log)."""
        if self._queue is not None and self._writer is not None and self._writer.is_alive():
            done = threading.Event()
            self._queue.put(done)
            done.wait(timeout)

    def _open(self) -> None:
        self._fh = open(self.path, "ab")
        self._size = self._fh.tell()

    def _rotate(self) -> None:
        self._fh.close()
        self._fh = None
        if self.backups == 0:
            os.replace(self.path, self.path + ".old")
            os.remove(self.path + ".old")
        else:
            for k in range(self.backups - 1, 0, -1):
                src = f"{self.path}.{k}"
                if os.path.exists(src):
                    os.replace(src, f"{self.path}.{k + 1}")
            os.replace(self.path, self.path + ".1")
        self._open()
        self._retire_exited()

    def _retire_exited(self) -> None:
        if self.configured_path is not None:
            try:
                retire_exited_workers(self.configured_path, self.backups)
            except Exception:  # never a reason to fail a request or the log itself
                log.exception("decision log: retiring the files of exited workers failed")

    def _drop(self) -> None:
        self.dropped += 1
        if not self._dropping:
            self._dropping = True
            log.warning("decision log %s: %d lines wait for the writer (the disk is slow or stalled); "
                        "lines are dropped until it catches up", self.path or "<stdout>", self.max_queued)
        self._report()

    def _report(self) -> None:
        if self.on_error is not None:
            try:
                self.on_error()
            except Exception:  # a metric must never break routing
                log.exception("decision log error callback failed")

    def _fail(self, exc: Exception) -> None:
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass
            self._fh = None
        if not self._failing:
            log.warning("decision log %s cannot be written (%s); decisions go unlogged until it can",
                        self.path or "<stdout>", exc)
            self._failing = True
        self._report()

    def close(self) -> None:
        """Write what is queued, then close the file (and no longer at exit: a log replaced
        by a reload is not kept alive by its exit hook)."""
        atexit.unregister(self.close)
        writer = self._writer
        if writer is not None and writer.is_alive() and writer is not threading.current_thread():
            self._queue.put(_STOP)
            writer.join(10.0)
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None
