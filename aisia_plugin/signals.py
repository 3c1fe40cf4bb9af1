"""Conversation signals: what a conversation says about the quality of an answer (issue 40, see
docs/signals.md). Pure functions and one small class over plain data: no LiteLLM, no I/O, no clock.

Two sources:

- the new user message, read against the policy's lexicons (``signals.lexicons``): a
  correction ("that's wrong", "c'est faux"), dissatisfaction ("it doesn't work", "non funziona"),
  satisfaction ("thanks, that works"); and two structural signals that need no lexicon: a
  rephrase of the previous question (``rephrase_of``) and a regenerate (``is_regenerate``);
- the answer itself (``SignalReader.read_answer``): a refusal, an empty answer, a cut answer
  (``finish_reason: length``), invalid JSON where JSON was asked for, a repeat of the previous
  answer; and, in an agent loop, the tool result that comes back as an error
  (``SignalReader.read_tool_result``).

Precision comes first (a false correction blames a good answer), so the lexicon categories are
read the way a follow-up addresses an answer (``SignalReader.read_followup``):

1. Fenced code blocks, inline code, ``>`` quoted lines and text between double quotes ("...",
   « ... », “ ... ”) are removed: what a user pastes, quotes or mentions is not what they say.
2. A message over ``short_message_words`` words is read in its first sentence within
   ``lead_chars`` characters only: "That's wrong, ..." opens a follow-up, while a long new task
   that merely contains "wrong" (or ends with "thanks") judges no answer.
3. The ``neutral`` phrases are blanked out ("no problem", "c'est pas faux", "what's wrong with
   my code"), then one RE2 Set says which entries of the other categories occur.
4. A negative category (correction, dissatisfaction) wins over satisfaction ("thanks, but it
   still fails").

Matching is RE2 only (the patterns are policy data, the messages attacker-controlled): each
message costs one pass of the neutral union (its matches are blanked one after the other) and
one pass of a Set, both linear in the bytes read, which ``max_scan_chars`` bounds. The section is
read as data (a policy's typed ``signals`` section, policy.models.Signals; the YAML loader is never
imported here)."""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping, Optional

import re2

from .policy.models import SignalLexicon, Signals
from .re2compat import ANCHOR_BOTH, UNANCHORED, Set, match_of, search_options

# The kinds, by source. Their weights are the policy's (signals.weights, SignalWeights in the schema).
CORRECTION = "correction"
DISSATISFACTION = "dissatisfaction"
SATISFACTION = "satisfaction"
REGENERATE = "regenerate"
REPHRASE = "rephrase"
REFUSAL = "refusal"
EMPTY_ANSWER = "empty_answer"
TRUNCATED = "truncated"
INVALID_JSON = "invalid_json"
TOOL_ERROR = "tool_error"
REPEATED_ANSWER = "repeated_answer"
# Not read from any text: the user went on (a new message with no signal in it) after the answer.
# Weak evidence (users also move on after a wrong answer), weighted 0 unless a policy sets it.
NO_COMPLAINT = "no_complaint"
# Not a conversation signal (no weight, never recorded): an answer that opens by hedging, one of
# the defects local-first's confidence reads (docs/local-first.md, ``SignalReader.hedges``).
HEDGING = "hedging"

KINDS = (CORRECTION, DISSATISFACTION, SATISFACTION, REGENERATE, REPHRASE, REFUSAL, EMPTY_ANSWER,
         TRUNCATED, INVALID_JSON, TOOL_ERROR, REPEATED_ANSWER)
# Every kind a policy weighs (signals.weights): the ones read, and the absence of any.
WEIGHTED_KINDS = (*KINDS, NO_COMPLAINT)
NEGATIVE_FOLLOWUP = frozenset({CORRECTION, DISSATISFACTION})  # "negative signals" of the precision target

# Lexicon categories: read on the new user message, blanked before it, read on an answer's
# start, read on a tool result's start.
USER_CATEGORIES = (CORRECTION, DISSATISFACTION, SATISFACTION)
NEUTRAL = "neutral"
CATEGORIES = (*USER_CATEGORIES, NEUTRAL, REFUSAL, TOOL_ERROR, HEDGING)

_MAX_MEM = 32 << 20  # RE2's budget per program (its lazy DFA cache)
# Apostrophes and quotes as people type them (phones, word processors): read as the ASCII ones
# the patterns write.
_PUNCTUATION = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u00b4": "'", "\u2032": "'",
                              "\u201c": '"', "\u201d": '"', "\u00ab": '"', "\u00bb": '"', "\u201e": '"',
                              "\u00a0": " ", "\u202f": " "})


@dataclass  # (treated as immutable, not frozen: built per request; as bandit.ArmStats)
class Signal:
    """One piece of evidence about an answer: its kind, the lexicon language that said so ("" for
    a structural signal) and what fired (a lexicon entry's name, or the rule)."""

    kind: str
    language: str = ""
    entry: str = ""


@dataclass(frozen=True)
class LexiconEntry:
    language: str
    category: str
    name: str
    pattern: str  # as compiled: the policy's, \b read as a Unicode word boundary


class SignalPatternError(ValueError):
    """A lexicon entry RE2 refuses, one that matches the empty string (it would fire on every
    message), or entries that together pass RE2's memory budget. ``entry`` names it (None when it
    cannot be told); the policy loader reports it at its line."""

    def __init__(self, message: str, entry: Optional[LexiconEntry] = None):
        super().__init__(message)
        self.entry = entry


def _options():
    return search_options(_MAX_MEM)


# RE2's \b sees ASCII letters only (no boundary between "ó" and ","): in a lexicon, \b means a
# boundary between a word character (an ASCII letter or digit, _, or any non-ASCII character
# but the punctuation below) and anything else, written with what RE2 has. Non-ASCII characters
# count as letters because RE2's Unicode classes (\pL) make every program several times larger
# and slower to build; the punctuation that matters is listed (typographic quotes and
# apostrophes are ASCII by then). It consumes the character beside the word, which is harmless
# here: a Set only says whether an entry occurs, and a neutral phrase blanks one more space or
# punctuation mark.
UNICODE_BOUNDARY = r"(?:^|$|[^0-9A-Za-z_\x{80}-\x{10FFFF}]|[¡¿…—–·«»])"


def unicode_boundaries(pattern: str) -> str:
    """The pattern with each ``\b`` read as a Unicode word boundary (one pass; an escaped
    backslash ``\\`` followed by b is left alone)."""
    if "\\b" not in pattern:
        return pattern
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            out.append(UNICODE_BOUNDARY if pattern[i + 1] == "b" else pattern[i:i + 2])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def lexicon_entries(lexicons: Mapping[str, SignalLexicon]) -> list[LexiconEntry]:
    """The entries of every language and category, in policy order, without removed (None) ones."""
    out = []
    for language, lexicon in lexicons.items():
        for category in CATEGORIES:
            for name, pattern in (getattr(lexicon, category, None) or {}).items():
                if pattern:
                    out.append(LexiconEntry(language, category, name, unicode_boundaries(pattern)))
    return out


# Whether a pattern matches the empty string somewhere depends only on the assertions true at a
# position (^ $ \A \z \b \B): the byte before it and the byte after it, each none, a newline, a
# word byte or another byte. These texts hold every such pair (as domains._CONTEXTS does).
_SIDES = ("", "\n", "a", " ")
_EMPTY_PROBES = tuple(((b + a).encode(), len(b)) for b in _SIDES for a in _SIDES)


def matches_empty(pattern: str) -> bool:
    """Whether an RE2 pattern can match the empty string (it would fire on every message).
    False for a pattern RE2 refuses: that is reported as such."""
    try:
        return _matches_empty(unicode_boundaries(pattern))
    except re2.error:
        return False


@lru_cache(maxsize=4096)
def _matches_empty(compiled_pattern: str) -> bool:
    """Whether a pattern as compiled (``\b`` rewritten) can match the empty string (memoised:
    every policy load checks the same shipped entries)."""
    match = match_of(re2.compile(compiled_pattern, _options()))
    return any(match(ANCHOR_BOTH, text, pos, pos)[0][0] >= 0 for text, pos in _EMPTY_PROBES)


def _check(entry: LexiconEntry) -> None:
    where = f"{entry.language}.{entry.category}.{entry.name}"
    try:
        empty = _matches_empty(entry.pattern)
    except re2.error as exc:
        raise SignalPatternError(f"signal pattern {where} is not RE2 syntax ({exc})", entry) from None
    if empty:
        raise SignalPatternError(f"signal pattern {where} matches the empty string: it would fire on every "
                                 "message", entry)


class _EntrySet:
    """An RE2 Set of lexicon entries: which of them occur in a text (one linear pass)."""

    def __init__(self, entries: list[LexiconEntry]):
        self.entries = entries
        self._match = None
        if not entries:
            return
        rset = Set(UNANCHORED, _options())
        for k, entry in enumerate(entries):
            if rset.Add(entry.pattern.encode("utf-8")) != k:
                raise SignalPatternError(f"signal pattern {entry.language}.{entry.category}.{entry.name}: RE2 "
                                         "cannot add it to a set", entry)
        if not rset.Compile():
            largest = max(entries, key=_program_size)  # the likeliest to blame (bounded repeats multiply a program)
            raise SignalPatternError(f"the signal patterns do not fit RE2's memory budget together; the largest "
                                     f"is {largest.language}.{largest.category}.{largest.name} (simplify them: "
                                     "bounded repeats such as [^.]{0,60} multiply a program's size)", largest)
        self._match = rset.Match

    def found(self, data: bytes) -> list[LexiconEntry]:
        if self._match is None or not data:
            return []
        hits = self._match(data)
        return [self.entries[k] for k in sorted(hits)] if hits else []


def _program_size(entry: LexiconEntry) -> int:
    """The size of an entry's own RE2 program (0 when RE2 refuses it alone)."""
    try:
        return re2.compile(entry.pattern, _options()).programsize
    except re2.error:
        return 0


class _Mask:
    """The neutral phrases as one RE2 program; ``blank`` overwrites each match with spaces."""

    def __init__(self, entries: list[LexiconEntry]):
        self._match = None
        if entries:
            try:
                self._match = match_of(re2.compile("|".join(f"(?:{e.pattern})" for e in entries), _options()))
            except re2.error:
                raise SignalPatternError("the neutral signal patterns do not fit RE2's memory budget together",
                                         entries[-1]) from None

    def blank(self, data: bytes) -> bytes:
        if self._match is None:
            return data
        out, pos, n = None, 0, len(data)
        while pos <= n:
            (start, end), = self._match(UNANCHORED, data, pos, n)
            if start < 0:
                break
            if end == start:  # unreachable (the loader refuses empty matches): step over a byte
                pos = end + 1
                continue
            if out is None:
                out = bytearray(data)
            out[start:end] = b" " * (end - start)
            pos = end
        return data if out is None else bytes(out)


# -- the text a signal reads ------------------------------------------------------------------

def _fence(line: str) -> Optional[str]:
    """The fence a line opens or closes (``` or ~~~), else None."""
    stripped = line.lstrip()
    for fence in ("```", "~~~"):
        if stripped.startswith(fence):
            return fence
    return None


def _drop_between(text: str, mark: str) -> str:
    """The text without its spans between two ``mark`` characters (inline code, a quotation);
    an unpaired last mark keeps the text after it."""
    if mark not in text:
        return text
    parts = text.split(mark)
    # Odd-numbered parts are between marks.
    if len(parts) % 2 == 0:
        parts, tail = parts[:-1], mark + parts[-1]
    else:
        tail = ""
    return " ".join(parts[0::2]) + tail


_OPENING_QUOTES, _CLOSING_QUOTES, _AFTER_QUOTE = "'\u2018", "'\u2019", ".,;:!?)\u00bb"


def _drop_single_quoted(text: str) -> str:
    """The text without its mentions between single quotes ("translate 'this is wrong'", "comment
    dit-on 'c'est faux'"): from a word that opens with a quote to the next word that closes with
    one (its punctuation after the quote kept). An apostrophe inside a word (that's, c'est) opens
    nothing, and an unclosed quote keeps the text after it. One pass over each line's words."""
    if "'" not in text and "\u2018" not in text:
        return text
    lines = []
    for line in text.split("\n"):
        words, kept, start = line.split(" "), [], None
        for i, word in enumerate(words):
            if start is None:
                if len(word) < 2 or word[0] not in _OPENING_QUOTES:
                    kept.append(word)
                    continue
                start = i
            bare = word.rstrip(_AFTER_QUOTE)
            if bare[-1:] in _CLOSING_QUOTES and (i > start or len(bare) > 2):
                kept.append(word[len(bare):])
                start = None
        if start is not None:
            kept.extend(words[start:])
        lines.append(" ".join(kept))
    return "\n".join(lines)


def _first_sentence(text: str) -> str:
    """The text up to its first sentence end (. ! ? or a line break followed by a space or the
    end), or all of it."""
    for i, c in enumerate(text):
        if c == "\n" or (c in ".!?" and (i + 1 == len(text) or text[i + 1].isspace())):
            return text[:i + 1]
    return text


def own_words(text: str) -> str:
    """What the user wrote themselves: without fenced code blocks (``` or ~~~, closed or not),
    inline code and ``>`` quoted lines. One pass over the lines."""
    if "`" not in text and "~~~" not in text and ">" not in text:
        return text
    kept, fence = [], None
    for line in text.splitlines():
        marker = _fence(line)
        if fence is not None:
            if marker == fence:
                fence = None
            continue
        if marker is not None:
            fence = marker
            continue
        if line.lstrip().startswith(">"):
            continue
        kept.append(_drop_between(line, "`"))
    return "\n".join(kept)


def bounded(text: str, max_chars: int) -> str:
    """The text's start and end within ``max_chars`` (what any signal reads of a message)."""
    if len(text) > max_chars:
        half = max_chars // 2
        text = text[:half] + "\n" + text[-half:]
    return text


def normalised(text: str, max_chars: int) -> str:
    """The text as patterns read it: ``bounded``, NFC (an accent typed as a combining mark is the
    letter the patterns name), typographic apostrophes as '."""
    text = bounded(text, max_chars)
    if not text.isascii():
        if not unicodedata.is_normalized("NFC", text):
            text = unicodedata.normalize("NFC", text)
        text = text.translate(_PUNCTUATION)
    return text


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "replace")


# -- similarity (rephrase, repeated answer) ---------------------------------------------------

# What is not a letter or a digit (str.isalnum: re's \w is exactly isalnum and "_"). A fixed
# class, linear in the text.
_NOT_ALNUM = re.compile(r"[\W_]")


_BLANK = (" ", " ", " ")  # three spaces in a row: no letter or digit in it


def _shingles(text: str, max_chars: int) -> set[tuple]:
    # casefold, accents kept (they distinguish words), whitespace and punctuation collapsed.
    words = _NOT_ALNUM.sub(" ", text[:max_chars].casefold()).split()
    flat = " " + " ".join(words) + " "
    # Every 3 characters in a row, as zip's tuples (one tuple per trigram, one to one with its
    # string): the coefficient only counts them, and joining each one costs more than the tuple.
    return set(zip(flat, flat[1:], flat[2:]))


def similarity(a: str, b: str, max_chars: int = 4000) -> float:
    """Dice coefficient of the two texts' character trigrams (case, spacing and punctuation
    ignored), in [0, 1]: cheap, linear in the texts, indifferent to the language and tolerant of
    inflections and typos. 0 when either text has no letter or digit."""
    sa, sb = _shingles(a, max_chars), _shingles(b, max_chars)
    sa.discard(_BLANK)
    sb.discard(_BLANK)
    if not sa or not sb:
        return 0.0
    return 2 * len(sa & sb) / (len(sa) + len(sb))


def word_count(text: str) -> int:
    return len(text.split())


# -- the reader ---------------------------------------------------------------------------------

@dataclass  # (treated as immutable, not frozen: built per answered request; as bandit.ArmStats)
class AnswerView:
    """What the reader needs of an answer: its text, LiteLLM's finish_reason, whether the answer
    called tools, and whether the request asked for JSON (``response_format`` json_object or
    json_schema)."""

    text: str
    finish_reason: Optional[str] = None
    has_tool_calls: bool = False
    wants_json: bool = False


def _signal(entry: LexiconEntry) -> Signal:
    return Signal(entry.category, entry.language, entry.name)


class SignalReader:
    """Compiled once from a policy's ``signals`` section; its readers never raise on a message.
    It reads whatever it is given: ``signals.enabled`` switches the conversation tracking that
    calls it for learning (litellm/conversations.py), not local-first's reading of an answer."""

    def __init__(self, section: Signals):
        self.max_scan_chars = int(section.max_scan_chars)
        self.short_message_words = int(section.short_message_words)
        self.lead_chars = int(section.lead_chars)
        self.rephrase_min_similarity = float(section.rephrase_min_similarity)
        self.rephrase_min_words = int(section.rephrase_min_words)
        self.repeat_min_similarity = float(section.repeat_min_similarity)
        self.repeat_min_words = int(section.repeat_min_words)
        self.answer_lead_chars = int(section.answer_lead_chars)
        entries = lexicon_entries(section.lexicons)
        for entry in entries:
            _check(entry)
        by_category = {c: [e for e in entries if e.category == c] for c in CATEGORIES}
        self.languages = tuple(dict.fromkeys(e.language for e in entries))
        self._mask = _Mask(by_category[NEUTRAL])
        self._user = _EntrySet([e for e in entries if e.category in USER_CATEGORIES])
        self._refusal = _EntrySet(by_category[REFUSAL])
        self._tool_error = _EntrySet(by_category[TOOL_ERROR])
        self._hedging = _EntrySet(by_category[HEDGING])

    # -- the new user message ----------------------------------------------------------------

    def followup_text(self, text: str) -> str:
        """The part of a user message the lexicons read (steps 1 and 2 of the module docstring)."""
        text = _drop_single_quoted(_drop_between(normalised(own_words(bounded(text, self.max_scan_chars)),
                                                            self.max_scan_chars), '"'))
        if word_count(text) > self.short_message_words:
            text = _first_sentence(text[:self.lead_chars])
        return text

    def read_followup(self, text) -> tuple[Signal, ...]:
        """The lexicon signals of a new user message (correction, dissatisfaction, satisfaction),
        one per kind (the first entry in policy order that fired), negative before positive."""
        if not isinstance(text, str) or not text.strip():
            return ()
        found = self._user.found(self._mask.blank(_utf8(self.followup_text(text))))
        first: dict[str, LexiconEntry] = {}
        for entry in found:
            first.setdefault(entry.category, entry)
        if first.keys() & NEGATIVE_FOLLOWUP:
            first.pop(SATISFACTION, None)
        return tuple(_signal(first[c]) for c in USER_CATEGORIES if c in first)

    def rephrase_of(self, new_text, previous_text) -> Optional[Signal]:
        """A rephrase: the new user message asks the previous user message's question again
        (similar at or above rephrase_min_similarity, both long enough, not the same text twice
        from a client that re-sent it, which the caller tells by the history)."""
        if not isinstance(new_text, str) or not isinstance(previous_text, str):
            return None
        new = normalised(own_words(bounded(new_text, self.max_scan_chars)), self.max_scan_chars)
        old = normalised(own_words(bounded(previous_text, self.max_scan_chars)), self.max_scan_chars)
        if word_count(new) < self.rephrase_min_words or word_count(old) < self.rephrase_min_words:
            return None
        score = similarity(new, old, self.max_scan_chars)
        if score >= self.rephrase_min_similarity:
            return Signal(REPHRASE, "", f"similarity {score:.2f}")
        return None

    # -- the answer --------------------------------------------------------------------------

    def read_answer(self, answer: AnswerView, previous_answer: Optional[str] = None) -> tuple[Signal, ...]:
        """The signals an answer carries by itself: truncated, empty, invalid JSON, refusal, and a
        repeat of ``previous_answer`` (the assistant message before it in the conversation)."""
        out: list[Signal] = []
        text = answer.text if isinstance(answer.text, str) else ""
        if answer.finish_reason == "length":
            out.append(Signal(TRUNCATED, "", "finish_reason length"))
        if not text.strip():
            if not answer.has_tool_calls:
                out.append(Signal(EMPTY_ANSWER, "", "no text and no tool call"))
            return tuple(out)
        if answer.wants_json and answer.finish_reason != "length" and not parses_as_json(text):
            out.append(Signal(INVALID_JSON, "", "response_format asked for JSON"))
        lead = normalised(text[:self.answer_lead_chars], self.answer_lead_chars)
        refusals = self._refusal.found(_utf8(lead))
        if refusals:
            out.append(_signal(refusals[0]))
        if isinstance(previous_answer, str) and self.repeats(text, previous_answer):
            out.append(Signal(REPEATED_ANSWER, "", "same as the previous answer"))
        return tuple(out)

    def repeats(self, answer: str, previous_answer: str) -> bool:
        if word_count(answer) < self.repeat_min_words or word_count(previous_answer) < self.repeat_min_words:
            return False
        return similarity(answer, previous_answer, self.max_scan_chars) >= self.repeat_min_similarity

    def read_tool_result(self, content) -> Optional[Signal]:
        """A tool result (a ``tool`` message of the next request) that says the call failed."""
        text = content_text(content)
        if not text.strip():
            return None
        found = self._tool_error.found(_utf8(normalised(text[:self.answer_lead_chars], self.answer_lead_chars)))
        return Signal(TOOL_ERROR, found[0].language, found[0].name) if found else None


    def hedges(self, text) -> Optional[Signal]:
        """An answer that opens by hedging ("I'm not sure", "je ne suis pas sûr"), read on its
        first ``answer_lead_chars`` characters like a refusal; None otherwise. Read by
        local-first's confidence only (docs/local-first.md): no conversation signal."""
        if not isinstance(text, str) or not text.strip():
            return None
        found = self._hedging.found(_utf8(normalised(text[:self.answer_lead_chars], self.answer_lead_chars)))
        return Signal(HEDGING, found[0].language, found[0].name) if found else None


_BUILT: dict = {}


def reader_for(section: Signals) -> SignalReader:
    """The SignalReader of a policy's ``signals`` section, compiled once per distinct section (the
    policy loader builds it to check that it can be built, each engine keeps its policy's as
    ``Engine.signal_reader``, which the proxy's steps read: this is not called per request)."""
    key = section.model_dump_json()
    hit = _BUILT.get(key)
    if hit is None:
        if len(_BUILT) >= 8:
            _BUILT.clear()
        hit = _BUILT[key] = SignalReader(section)
    return hit


def parses_as_json(text: str) -> bool:
    """Whether an answer is JSON, once a single surrounding Markdown fence (```json ... ```) is
    taken off (clients that asked for JSON commonly strip one)."""
    body = text.strip()
    if body.startswith("```") and body.endswith("```") and len(body) >= 6:
        body = body[3:-3]
        first_line, _, rest = body.partition("\n")
        if first_line.strip().isalpha() or not first_line.strip():
            body = rest
    try:
        json.loads(body)
    except (ValueError, RecursionError):
        return False
    return True


def content_text(content) -> str:
    """The text of a message's ``content``: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content
                         if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""
