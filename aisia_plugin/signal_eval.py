"""Precision and recall of the conversation signals on a labelled set (tests/data/signal_followups.jsonl),
for benchmarks/signal_precision.py and tests/test_signals.py.

Each item of the set is one observation the proxy would read, labelled by hand with the kinds it
should raise: a new user message (``source: user``, with ``previous``, the previous user message,
where a rephrase is in question), a pair of requests (``source: request``: is ``after`` a
regenerate of ``before``), an answer (``source: answer``, with ``previous``, the previous answer,
``finish_reason``, ``wants_json``, ``has_tool_calls``) or a tool result (``source: tool``). An item
is scored only on the kinds its source can raise.

The set is split by a fixed rule (``held_out``: the CRC-32 of the text, modulo 3, is 0), so that
the lexicon can be tuned on the rest and the held-out third still says how it does on
messages it was not tuned on. Items are also marked by when they were written: ``batch:
frozen-1`` after the first round of tuning (their non-held-out part then served the second round),
``frozen-2`` (``UNTUNED_BATCH``) after the second round: no entry was tuned on them, not even by
the third round, which was tuned on ``review-1`` (false readings a review of 2026-12-06 found)."""

from __future__ import annotations

import json
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from .conversation import is_regenerate
from .signals import (CORRECTION, DISSATISFACTION, EMPTY_ANSWER, INVALID_JSON, NEGATIVE_FOLLOWUP, REFUSAL, REGENERATE,
                      REPEATED_ANSWER, REPHRASE, SATISFACTION, TOOL_ERROR, TRUNCATED, AnswerView, SignalReader)

NEGATIVE = "negative"  # correction or dissatisfaction: the group the precision floor is about
PRECISION_FLOOR = 0.9  # issue 40: negative-signal precision per language
UNTUNED_BATCH = "frozen-2"  # the items no lexicon entry was tuned on

# The kinds each source can raise (an item is scored on these only).
SCORED = {
    "user": (CORRECTION, DISSATISFACTION, SATISFACTION),
    "user+previous": (CORRECTION, DISSATISFACTION, SATISFACTION, REPHRASE),
    "request": (REGENERATE,),
    "answer": (REFUSAL, EMPTY_ANSWER, TRUNCATED, INVALID_JSON, REPEATED_ANSWER),
    "tool": (TOOL_ERROR,),
}


def data_path() -> Path:
    return Path(__file__).resolve().parent.parent / "tests" / "data" / "signal_followups.jsonl"


def load_items(path: Optional[Path] = None) -> list[dict]:
    with open(path or data_path(), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def held_out(item: dict) -> bool:
    return zlib.crc32(item["text"].encode("utf-8")) % 3 == 0


def _scope(item: dict) -> str:
    if item["source"] == "user" and "previous" in item:
        return "user+previous"
    return item["source"]


def predicted_kinds(reader: SignalReader, item: dict) -> set[str]:
    """What the reader raises on an item (the kinds its source can raise)."""
    source = item["source"]
    if source == "user":
        kinds = {s.kind for s in reader.read_followup(item["text"])}
        if "previous" in item and reader.rephrase_of(item["text"], item["previous"]):
            kinds.add(REPHRASE)
        return kinds
    if source == "request":
        return {REGENERATE} if is_regenerate(item["before"], item["after"]) else set()
    if source == "answer":
        view = AnswerView(item["text"], item.get("finish_reason"), bool(item.get("has_tool_calls")),
                          bool(item.get("wants_json")))
        return {s.kind for s in reader.read_answer(view, item.get("previous"))}
    if source == "tool":
        return {TOOL_ERROR} if reader.read_tool_result(item["text"]) else set()
    raise ValueError(f"unknown source {source!r}")


@dataclass
class Count:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    support: int = 0  # items on which the kind was scored

    @property
    def precision(self) -> Optional[float]:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> Optional[float]:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    def as_dict(self) -> dict:
        return {"tp": self.tp, "fp": self.fp, "fn": self.fn, "support": self.support,
                "precision": self.precision, "recall": self.recall}


@dataclass
class Report:
    """Counts per (kind or 'negative', language or 'all'), and the items it got wrong."""

    counts: dict = field(default_factory=lambda: defaultdict(Count))
    errors: list = field(default_factory=list)

    def add(self, kind: str, language: str, want: bool, got: bool) -> None:
        for lang in (language, "all"):
            c = self.counts[(kind, lang)]
            c.support += 1
            c.tp += want and got
            c.fp += got and not want
            c.fn += want and not got

    def get(self, kind: str, language: str) -> Count:
        return self.counts.get((kind, language), Count())

    def languages(self) -> list[str]:
        return sorted({lang for _, lang in self.counts} - {"all"}) + ["all"]

    def kinds(self) -> list[str]:
        return sorted({k for k, _ in self.counts})


def evaluate(reader: SignalReader, items: Iterable[dict]) -> Report:
    report = Report()
    for item in items:
        want, got = set(item["kinds"]), predicted_kinds(reader, item)
        scored = SCORED[_scope(item)]
        for kind in scored:
            report.add(kind, item["lang"], kind in want, kind in got)
        if item["source"] == "user":
            report.add(NEGATIVE, item["lang"], bool(want & NEGATIVE_FOLLOWUP), bool(got & NEGATIVE_FOLLOWUP))
        if (want & set(scored)) != (got & set(scored)):
            report.errors.append({"lang": item["lang"], "text": item["text"], "want": sorted(want),
                                  "got": sorted(got), "held_out": held_out(item)})
    return report
