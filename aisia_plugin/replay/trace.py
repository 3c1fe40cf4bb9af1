"""Replay traces: JSON Lines, one recorded request a line, with the outcome of each candidate.

    {"id": "r1", "messages": [{"role": "user", "content": "..."}], "label": "optional",
     "outcomes": {"<candidate>": {"score": 0.8, "cost_usd": 0.0012, "latency_ms": 830,
                                  "input_tokens": 120, "output_tokens": 58}, ...}}

Every outcome field but ``score`` is optional; an outcome with ``error`` (a message) records a
failed call and needs no score (``status_code`` may say how it failed: 429, 500, ...). Blank lines
are skipped. Every problem found is reported as ``file:line: message`` (not only the first)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

MAX_REPORTED = 20  # problems listed before the rest are summarised

OUTCOME_FIELDS = ("score", "cost_usd", "latency_ms", "input_tokens", "output_tokens", "error", "status_code", "error_type")


@dataclass(frozen=True)
class TraceIssue:
    file: str
    line: int
    message: str

    def format(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


class TraceError(ValueError):
    """A trace that cannot be replayed; str() lists every problem as file:line: message."""

    def __init__(self, issues: list[TraceIssue], more: int = 0):
        self.issues = list(issues)
        self.more = more
        super().__init__(str(self))

    def __str__(self) -> str:
        lines = [i.format() for i in self.issues]
        if self.more:
            lines.append(f"... and {self.more} more problem(s)")
        return "\n".join(lines) or "invalid trace"


@dataclass(frozen=True)
class RecordedOutcome:
    """One candidate's recorded answer to one request."""

    score: Optional[float] = None
    cost_usd: Optional[float] = None
    latency_ms: Optional[float] = None
    input_tokens: Optional[int] = None
    output_tokens: Optional[int] = None
    error: Optional[str] = None
    status_code: Optional[int] = None
    error_type: Optional[str] = None

    @property
    def failed(self) -> bool:
        return self.error is not None


@dataclass(frozen=True)
class TraceRecord:
    index: int  # 0-based position among the requests
    line: int  # 1-based line in the file
    id: str
    messages: list
    outcomes: dict  # candidate -> RecordedOutcome
    label: Optional[str] = None


@dataclass
class Trace:
    path: str
    records: list[TraceRecord] = field(default_factory=list)

    @property
    def candidates(self) -> list[str]:
        """Every candidate named by some request, in order of first appearance."""
        seen: dict[str, None] = {}
        for r in self.records:
            for name in r.outcomes:
                seen.setdefault(name, None)
        return list(seen)

    def __len__(self) -> int:
        return len(self.records)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _parse_outcome(name: str, raw: Any, problems: list[str]) -> Optional[RecordedOutcome]:
    where = f"outcomes.{name}"
    if not isinstance(raw, dict):
        problems.append(f"{where}: must be an object, got {type(raw).__name__}")
        return None
    unknown = sorted(set(raw) - set(OUTCOME_FIELDS))
    if unknown:
        problems.append(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(OUTCOME_FIELDS)}")
    ok = True
    error = raw.get("error")
    if error is not None and not isinstance(error, str):
        problems.append(f"{where}.error: must be a string (the failure message)")
        ok = False
    score = raw.get("score")
    if score is None:
        if error is None:
            problems.append(f"{where}: needs a score (0-1), or an error for a failed call")
            ok = False
    elif not _is_number(score) or not 0.0 <= score <= 1.0:
        problems.append(f"{where}.score: must be a number from 0 to 1, got {json.dumps(score)}")
        ok = False
    for key in ("cost_usd", "latency_ms"):
        v = raw.get(key)
        if v is not None and (not _is_number(v) or v < 0):
            problems.append(f"{where}.{key}: must be a number >= 0, got {json.dumps(v)}")
            ok = False
    for key in ("input_tokens", "output_tokens"):
        v = raw.get(key)
        if v is not None and (not _is_number(v) or v < 0 or float(v) != int(v)):
            problems.append(f"{where}.{key}: must be a whole number >= 0, got {json.dumps(v)}")
            ok = False
    status = raw.get("status_code")
    if status is not None and (not _is_number(status) or float(status) != int(status) or not 100 <= status <= 599):
        problems.append(f"{where}.status_code: must be an HTTP status (100-599), got {json.dumps(status)}")
        ok = False
    etype = raw.get("error_type")
    if etype is not None and not isinstance(etype, str):
        problems.append(f"{where}.error_type: must be a string (an exception class name)")
        ok = False
    if not ok:
        return None

    def opt_int(key):
        v = raw.get(key)
        return None if v is None else int(v)

    def opt_float(key):
        v = raw.get(key)
        return None if v is None else float(v)

    return RecordedOutcome(
        score=opt_float("score"), cost_usd=opt_float("cost_usd"), latency_ms=opt_float("latency_ms"),
        input_tokens=opt_int("input_tokens"), output_tokens=opt_int("output_tokens"),
        error=error, status_code=opt_int("status_code"), error_type=etype,
    )


def _parse_messages(raw: Any, problems: list[str]) -> Optional[list]:
    if not isinstance(raw, list) or not raw:
        problems.append("messages: must be a non-empty list of {role, content} objects")
        return None
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            problems.append(f"messages[{i}]: must be an object with role and content")
            return None
        if not isinstance(m.get("role"), str):
            problems.append(f"messages[{i}].role: must be a string")
            return None
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            problems.append(f"messages[{i}].content: must be a string or a list of content parts")
            return None
    return raw


def parse_record(obj: Any, index: int, line: int) -> tuple[Optional[TraceRecord], list[str]]:
    """One decoded JSON value as a TraceRecord; the problems found (without the location)."""
    problems: list[str] = []
    if not isinstance(obj, dict):
        return None, [f"each line must be a JSON object, got {type(obj).__name__}"]
    rid = obj.get("id", f"line-{line}")
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        problems.append("id: must be a string")
    rid = str(rid)
    label = obj.get("label")
    if label is not None and not isinstance(label, str):
        problems.append("label: must be a string")
    if "messages" not in obj:
        problems.append("missing 'messages'")
        messages = None
    else:
        messages = _parse_messages(obj["messages"], problems)
    raw_outcomes = obj.get("outcomes")
    outcomes: dict[str, RecordedOutcome] = {}
    if not isinstance(raw_outcomes, dict) or not raw_outcomes:
        problems.append("outcomes: must be a non-empty object {candidate: outcome}")
    else:
        for name, raw in raw_outcomes.items():
            if not name:
                problems.append("outcomes: a candidate name must not be empty")
                continue
            o = _parse_outcome(name, raw, problems)
            if o is not None:
                outcomes[name] = o
    if problems:
        return None, problems
    return TraceRecord(index=index, line=line, id=rid, messages=messages, outcomes=outcomes, label=label), []


def load_trace(path: str) -> Trace:
    """Read and check a whole trace. Raises TraceError (every problem, file:line: message) or
    OSError when the file cannot be opened."""
    trace = Trace(path=str(path))
    issues: list[TraceIssue] = []
    more = 0
    first_line_of: dict[str, int] = {}

    def problem(line: int, message: str):
        nonlocal more
        if len(issues) < MAX_REPORTED:
            issues.append(TraceIssue(str(path), line, message))
        else:
            more += 1

    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                problem(lineno, f"not UTF-8 text ({exc.reason} at byte {exc.start})")
                continue
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                problem(lineno, f"invalid JSON: {exc.msg} (column {exc.colno})")
                continue
            except RecursionError:
                problem(lineno, "invalid JSON: nested too deeply")
                continue
            record, problems = parse_record(obj, len(trace.records), lineno)
            for p in problems:
                problem(lineno, p)
            if record is None:
                continue
            if record.id in first_line_of:
                problem(lineno, f"duplicate id {record.id!r} (first on line {first_line_of[record.id]})")
                continue
            first_line_of[record.id] = lineno
            trace.records.append(record)
    if not issues and not trace.records:
        issues.append(TraceIssue(str(path), 1, "the trace holds no requests"))
    if issues:
        raise TraceError(issues, more)
    return trace


def prompt_chars(messages) -> int:
    """Characters of text in the messages (content strings and text parts)."""
    n = 0
    for m in messages or ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            n += len(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    n += len(part["text"])
                elif isinstance(part, str):
                    n += len(part)
    return n


def write_records(path, records: list[dict]) -> None:
    """Trace records (dicts of the format above) as a JSON Lines file, one request a line."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
