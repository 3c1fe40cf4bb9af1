"""Request features from OpenAI-format messages (docs/design.md#request-features).

Pure (no I/O) and linear-time: prompts are attacker-controlled, so there is no backtracking regex
here. Every keyword list and phrase (task types, creative, real-time, image/audio output requests,
code syntax) is one entry of a single RE2 set, so the prompt is scanned once, in linear time, and
the scan says which entries matched; character classes are counted with ``bytes.translate``
(C loops, linear).

Cost: this runs on every routing decision, so extract_features is written for speed, with the
same results as the straightforward form: the RE2 set scan (one DFA pass, about half of the
total) and one class-counting pass over the bytes are the only per-byte work; the rest is kept to
a few dozen bytecodes (see the comments at RequestFeatures, _specificity and extract_features).
The figures: benchmarks/results/overhead.md ("Pieces of our decision").

Specificity heuristic (``RequestFeatures.specificity``, 0..1, read by the rules strategy's
specificityMatch): how technical/precise the request looks, from four signals on the scanned
text, each saturating at 1:

- symbols (0.35): share of code/maths symbols ``_(){}[]=<>/\\#$^*|~`` among characters, 5 % = 1;
- digits (0.15): share of digits among characters, 5 % = 1;
- vocabulary (0.30): mean length of the distinct words, 4 letters = 0, 8 or more = 1 (jargon and
  identifiers are long, chit-chat is short);
- code (0.20): detected code syntax.

Prompts under 8 words are scaled down in proportion (a two-word prompt says too little to be
specific). "Hello, how are you?" scores about 0.05; a traceback or a maths problem 0.5 to 0.9."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Optional

import re2

from .re2compat import UNANCHORED, match_of, set_match_of

_OPT = re2.Options()
_OPT.case_sensitive = False
_OPT.log_errors = False
_OPT.max_mem = 32 << 20

_CLASSES = bytearray(b"L" * 256)  # byte -> class: L letter, D digit, S code/maths symbol, P punctuation, " " blank
for _c in b"0123456789":
    _CLASSES[_c] = ord("D")
for _c in b"_(){}[]=<>/\\#$^*|~":
    _CLASSES[_c] = ord("S")
for _c in b".,;:!?'\"-@%&+`":
    _CLASSES[_c] = ord("P")
for _c in b" \n\t\r\f\v":
    _CLASSES[_c] = ord(" ")
_CLASSES = bytes(_CLASSES)
_NB = r"(?:^|[^\pL\pN_])"   # a word boundary that, unlike RE2's \b, knows accented letters
_NA = r"(?:$|[^\pL\pN_])"


def _words(text: str) -> str:
    return _NB + "(?:" + "|".join(re2.escape(w) for w in text.split()) + ")" + _NA


def _literals(items) -> str:
    return "|".join(re2.escape(i) for i in items)


_TASK_NAMES = ("debugging", "review", "documentation", "planning", "coding", "analysis")
_TASK_WORDS = (
    """debug debugging debugger bug bugs error errors exception exceptions traceback stacktrace crash
    crashes crashing segfault fix fixing broken erreur erreurs bogue plante plantage corrige corriger
    déboguer débogue dépanne""",
    "review reviewing reviewer critique audit relis relire relecture revue feedback",
    """document documentation docstring docstrings readme docs commentaire commentaires changelog
    tutorial tutoriel""",
    """plan planning roadmap architecture design strategy stratégie planifie planifier milestones étapes
    schedule""",
    """code coding function fonction class script implement implémente implémenter program programme
    programming python javascript typescript java rust golang sql api regex refactor compile algorithm
    algorithme""",
    """analyze analyse analyser analysis compare comparer evaluate évalue évaluer assess explain explique
    expliquer why pourquoi summarize résume""",
)
_CREATIVE = _words("""poem poems poème poèmes poetry poésie story stories conte contes novel nouvelle lyrics
    paroles haiku haïku sonnet screenplay scénario fiction fable limerick slogan ballad ballade""") + "|" + _literals(
    ("creative writing", "écriture créative", "write a song", "écris une chanson", "once upon a time",
     "il était une fois"))
_REALTIME = _words("""quick quickly asap urgent urgently immediately instantly realtime autocomplete
    autocompletion vite rapidement rapide immédiatement urgence""") + "|" + _literals(
    ("real-time", "real time", "temps réel", "temps-réel", "tout de suite", "right now", "au plus vite",
     "low latency", "faible latence"))
_IMAGE_OUT = (r"\b(?:generate|create|draw|make|render|paint|design|produce)\b(?:\s+\S+){0,4}?\s+"
              r"(?:images?|pictures?|illustrations?|drawing|painting|logo|portrait|wallpaper|artwork|photo)\b"
              r"|(?:génère\w*|crée\w*|dessine\w*|produi\w*)(?:\s+\S+){0,4}?\s+(?:images?|illustrations?|dessin|logo|photo|peinture)"
              r"|\bdall-?e\b|\bstable diffusion\b|\bmidjourney\b|\btext-to-image\b")
_AUDIO_OUT = _words("tts") + "|" + _literals(
    ("text to speech", "text-to-speech", "read it aloud", "read this aloud", "read aloud", "out loud",
     "à voix haute", "synthèse vocale", "voice message", "audio version", "as audio", "en audio",
     "as an mp3", "en mp3", "spoken version", "narrate this"))
_STRONG_CODE = _literals(("```", "#include", "console.log", "public static", "system.out", "<?php", "();",
                          "){", ") {", "};", "=>", "!==", "===", "print(", "\ndef ", "\nclass ",
                          "\nimport ", "\nfrom ", "\n    return", "\treturn", "printf(", "#!/", "std::",
                          "pip install", "npm install"))
_WEAK_CODE = ("def ", "class ", "import ", "function ", "return ", " = ", "[i]", "==", "!=", "++", "->",
              "::", "/*", "//", "\t", "self.", "this.")

# The keyword questions, as (name, RE2 pattern) in the order of their entry numbers.
SCAN_ENTRIES: tuple[tuple[str, str], ...] = (
    *zip(_TASK_NAMES, map(_words, _TASK_WORDS)), ("creative", _CREATIVE), ("realtime", _REALTIME),
    ("image", _IMAGE_OUT), ("audio", _AUDIO_OUT), ("code", _STRONG_CODE),
    *((f"weak{i}", re2.escape(w)) for i, w in enumerate(_WEAK_CODE)),
    # Characters that hide words from the patterns (clean_text): the same pass tells whether the
    # text needs cleaning, so text without them pays nothing more.
    ("format", r"\p{Cf}"), ("mark", r"\p{Mn}"))
# Case-insensitive, like every entry of a Set that carries them (scan.PromptScanner).
SCAN_OPTIONS = _OPT

# One RE2 set: a single linear scan tells which of these matched anywhere in the prompt.
_SET = re2.Set.SearchSet(_OPT)
_IDX: dict[str, int] = {}
for _name, _pattern in SCAN_ENTRIES:
    _IDX[_name] = _SET.Add(_pattern)
_SET.Compile()
_SET_MATCH = set_match_of(_SET)
_WEAK_IDX = frozenset(v for k, v in _IDX.items() if k.startswith("weak"))
_MODALITY_NAMES = frozenset(["text", "image", "audio", "video"])

# Reading the Set's answer (a list of the matched entry numbers, a handful at most): plain list
# membership tests on it, no set() built per request (the entry numbers are small ints).
_CODE_I, _CREATIVE_I, _REALTIME_I, _IMAGE_I, _AUDIO_I = (_IDX[k] for k in ("code", "creative", "realtime",
                                                                          "image", "audio"))
_FORMAT_I, _MARK_I = _IDX["format"], _IDX["mark"]
_UNANCHORED = UNANCHORED
_ODD_MATCH = match_of(re2.compile(r"[\p{Cf}\p{Mn}]", _OPT))
# The task entries are the Set's first entries, numbered 0..5 in _TASK_NAMES order: the first task
# name (in _TASK_NAMES order) whose entry matched is the one of the smallest matched entry number.
if [_IDX[name] for name in _TASK_NAMES] != list(range(len(_TASK_NAMES))):  # not an assert: kept under -O
    raise RuntimeError("the task entries must be the Set's first entries, in _TASK_NAMES order")
_N_TASKS = len(_TASK_NAMES)

# Byte sets of the specificity classes (the same classes as _CLASSES), for bytes.translate(None, delete).
_LETTER_BYTES = bytes(b for b in range(256) if _CLASSES[b] == ord("L"))  # incl. every non-ASCII byte
_BLANK_BYTES = bytes(b for b in range(256) if _CLASSES[b] == ord(" "))
_DIGIT_BYTES = bytes(b for b in range(256) if _CLASSES[b] == ord("D"))
_SYMBOL_BYTES = bytes(b for b in range(256) if _CLASSES[b] == ord("S"))


class RequestFeatures:
    """What the engine and the strategies know of one request, built by keyword.

    Treated as immutable, as ``bandit.ArmStats`` is: nothing here, in the engine or in a plugin
    may change one after it is built (``replace`` makes a changed copy; the decision reads the
    very object the hooks were given). Not frozen, because a frozen class's ``__init__`` goes
    through ``object.__setattr__`` per field, several times the cost of plain assignments,
    and one is built per request.

    ``specificity`` may be left out (None): it is then computed from ``text`` and ``has_code`` on
    its first read and kept, since only the rules strategy reads it and it costs a pass over the
    text's bytes."""

    FIELDS = ("task_type", "has_code", "is_creative", "is_realtime", "length_bucket", "modality",
              "requested_modalities", "input_tokens", "has_tools", "specificity", "text", "extra",
              "estimate_probability", "turn_chars")
    # specificity is a property over a slot of its own (None until computed)
    __slots__ = tuple("_specificity" if name == "specificity" else name for name in FIELDS)

    def __init__(self, *, task_type: str = "default", has_code: bool = False, is_creative: bool = False,
                 is_realtime: bool = False, length_bucket: str = "short", modality: str = "text",
                 requested_modalities: tuple[str, ...] = ("text",), input_tokens: int = 0,
                 has_tools: bool = False, specificity: Optional[float] = None, text: str = "",
                 extra: Optional[Mapping[str, object]] = None, estimate_probability: bool = False,
                 turn_chars: int = 0):
        self.task_type = task_type
        self.has_code = has_code
        self.is_creative = is_creative
        self.is_realtime = is_realtime
        self.length_bucket = length_bucket
        self.modality = modality
        self.requested_modalities = requested_modalities
        self.input_tokens = input_tokens
        self.has_tools = has_tools
        self._specificity = specificity
        self.text = text
        self.extra = {} if extra is None else extra
        self.estimate_probability = estimate_probability
        # The last characters of `text` that hold what a conversation's request asks (its
        # `question`, conversation.question_text; 0: the whole text): what the contextual model
        # reads (contextual.py), as the request's quality domain is read on it (engine.py).
        self.turn_chars = turn_chars

    @property
    def specificity(self) -> float:
        if self._specificity is None:
            self._specificity = _specificity(_utf8(self.text), self.has_code)
        return self._specificity

    def as_dict(self) -> dict:
        """The fields by name (``specificity`` computed if it was left out)."""
        return {name: getattr(self, name) for name in self.FIELDS}

    def replace(self, **changes) -> "RequestFeatures":
        """A copy with these fields changed (a name that is not a field is a TypeError, from
        ``__init__``)."""
        return RequestFeatures(**{**self.as_dict(), **changes})

    def __eq__(self, other) -> bool:
        if type(other) is not RequestFeatures:
            return NotImplemented
        return self.as_dict() == other.as_dict()

    __hash__ = None  # mutable fields (``extra``): not a dict key

    def __repr__(self) -> str:
        return "RequestFeatures(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"

    def __getstate__(self):
        return self.as_dict()

    def __setstate__(self, state):
        self.__init__(**state)


def _content_parts(role: str, content):
    """(role, kind, text) for the parts of a list/tuple ``content``; odd parts are skipped."""
    for part in content:
        if isinstance(part, str):
            yield role, "text", part
            continue
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind == "text":
            t = part.get("text")
            if isinstance(t, str):
                yield role, "text", t
        elif kind in ("image_url", "image", "input_image"):
            yield role, "image", ""
        elif kind in ("input_audio", "audio"):
            yield role, "audio", ""
        elif kind in ("file", "input_file", "document"):
            yield role, "file", ""


def _role_content(m):
    """(role, content) of one message, role "" unless a str; None for a non-mapping or a
    mapping that raises when read (hostile input is skipped, never raised on)."""
    if type(m) is not dict and not isinstance(m, Mapping):
        return None
    try:
        role = m.get("role")
        content = m.get("content")
    except Exception:
        return None
    return (role if isinstance(role, str) else ""), content


def _parts(messages):
    """(role, kind, text) for every content part; odd shapes are skipped, never raised on."""
    if not isinstance(messages, (list, tuple)):
        return
    for m in messages:
        rc = _role_content(m)
        if rc is None:
            continue
        role, content = rc
        if isinstance(content, str):
            yield role, "text", content
        elif isinstance(content, (list, tuple)):
            yield from _content_parts(role, content)


def content_kinds(messages) -> frozenset:
    """The kinds of the non-text parts of OpenAI-format messages ("image", "audio", "file"); a
    request whose ``RequestFeatures.modality`` is "text" has none. Never raises."""
    return frozenset(kind for _, kind, _ in _parts(messages) if kind != "text")


def message_text(messages) -> str:
    """All the text of OpenAI-format messages, one part per line; never raises."""
    return "\n".join(t for _, kind, t in _parts(messages) if kind == "text" and t)


# Unicode's format characters (category Cf: zero-width spaces and joiners, soft hyphens, bidi
# controls, tags), as of Unicode 14; tests/test_features.py checks them against unicodedata.
FORMAT_RANGES = ((0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD), (0x070F, 0x070F),
                 (0x0890, 0x0891), (0x08E2, 0x08E2), (0x180E, 0x180E), (0x200B, 0x200F), (0x202A, 0x202E),
                 (0x2060, 0x2064), (0x2066, 0x206F), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD),
                 (0x110CD, 0x110CD), (0x13430, 0x13438), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
                 (0xE0001, 0xE0001), (0xE0020, 0xE007F))
_FORMAT = re.compile("[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in FORMAT_RANGES) + "]")


def clean_text(text: str, formats: bool = True, marks: bool = True) -> str:
    """The text patterns see: NFC (an accent typed as a separate combining mark, "e\u0301", is
    the letter "é" the patterns name) without format characters (a zero-width space inside a
    word would hide it). `formats`/`marks`: whether the text may hold format characters and
    combining marks (a scan that saw none says so, and that step is skipped)."""
    if marks and not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
    if formats:
        text = _FORMAT.sub("", text)
    return text


def scanned_bytes(text: str) -> tuple[str, bytes]:
    """``(clean_text(text), its UTF-8 bytes)``; text with neither format characters nor
    combining marks (ASCII at once, else one RE2 pass) is kept as it is."""
    raw = _utf8(text)
    if text.isascii() or _ODD_MATCH(_UNANCHORED, raw, 0, len(raw))[0][0] < 0:
        return text, raw
    text = clean_text(text)
    return text, _utf8(text)


def _utf8(text: str) -> bytes:
    try:
        return text.encode()  # the common case, a little cheaper than with an error handler
    except UnicodeEncodeError:  # lone surrogates: "?" for them
        return text.encode("utf-8", "replace")


def _bounded(text: str, max_chars: int) -> str:
    max_chars = max(2, int(max_chars))
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    return text[:half] + "\n" + text[-half:]


def _tool_chars(tools, budget: int = 4_000_000) -> int:
    """Approximate JSON size of the tool schemas, walked iteratively (no recursion, bounded)."""
    size, stack, seen = 0, [tools], 0
    while stack and size < budget and seen < 200_000:
        obj = stack.pop()
        seen += 1
        if isinstance(obj, str):
            size += len(obj) + 2
        elif isinstance(obj, Mapping):
            size += 2
            try:
                items = list(obj.items())
            except Exception:
                continue
            for k, v in items:
                size += (len(k) + 3) if isinstance(k, str) else 4
                stack.append(v)
        elif isinstance(obj, (list, tuple)):
            size += 2 + len(obj)
            stack.extend(obj)
        else:
            size += 5
    return min(size, budget)


def _requested(request_modalities, hits) -> tuple[str, ...]:
    if isinstance(request_modalities, str):
        request_modalities = [request_modalities]
    if isinstance(request_modalities, (list, tuple)):
        asked = tuple(dict.fromkeys(m.lower() for m in request_modalities
                                    if isinstance(m, str) and m.lower() in _MODALITY_NAMES))
        if asked:
            return asked
    if _IMAGE_I in hits:
        return ("image",)
    if _AUDIO_I in hits:
        return ("audio",)
    return ("text",)


def _specificity(raw: bytes, has_code: bool) -> float:
    # Class counts with bytes.translate(None, delete), each one C loop, the later ones on what is
    # left: the first drops the letters (most of a prompt), so the next three run on about a
    # quarter of the text. Translating every byte to its class letter and then counting four
    # classes over the whole text was five full passes, ~3x slower. letters = n - the other
    # classes: the same integers as before, and the score below is the same float expression
    # (min/max written as conditionals, which are cheaper than the builtin calls).
    n = len(raw)
    if not n:
        return 0.0
    rest = raw.translate(None, _LETTER_BYTES)  # blanks, digits, symbols, punctuation
    no_blank = rest.translate(None, _BLANK_BYTES)
    blanks = len(rest) - len(no_blank)
    if blanks >= n:
        return 0.0
    no_digit = no_blank.translate(None, _DIGIT_BYTES)
    digits = len(no_blank) - len(no_digit)
    symbols = len(no_digit) - len(no_digit.translate(None, _SYMBOL_BYTES))
    n_words = blanks + 1
    mean_len = (n - len(rest)) / n_words  # letters (and non-ASCII bytes) per word
    sym = symbols / n / 0.05
    dig = digits / n / 0.05
    voc = (mean_len - 4.0) / 4.0
    score = (0.35 * (sym if sym < 1.0 else 1.0) + 0.15 * (dig if dig < 1.0 else 1.0)
             + 0.30 * (0.0 if voc <= 0.0 else voc if voc < 1.0 else 1.0) + (0.20 if has_code else 0.0))
    if n_words < 8:
        score *= n_words / 8
    return round(0.0 if score <= 0.0 else score if score < 1.0 else 1.0, 4)


def extract_features(messages, tools=None, request_modalities=None, *, max_chars: int = 8000) -> RequestFeatures:
    """Features of one request. ``text`` is the user messages' text (latest last; all the text
    when there is no user message), bounded to ``max_chars`` keeping its start and its end; the
    detections run on that text. Never raises on odd message shapes."""
    return features_and_hits(messages, tools, request_modalities, max_chars=max_chars)[0]


def features_and_hits(messages, tools=None, request_modalities=None, *, max_chars: int = 8000,
                      scan=None, question: Optional[str] = None) -> tuple[RequestFeatures, tuple | list]:
    """``extract_features``, and the matched entry numbers of the scan of ``text``'s UTF-8 bytes.
    ``question``: what the request asks in a conversation (``conversation.question_text``, the
    caller's: it reads the policy's signal lexicons), marked as ``turn_chars`` when ``text`` ends
    with it.

    ``scan`` (bytes -> matched entry numbers, a Set's Match) may be a Set holding SCAN_ENTRIES
    first, in order, then entries of its own (numbered from len(SCAN_ENTRIES), ignored here): one
    pass then answers the features' questions and the caller's (scan.PromptScanner adds the
    policy's domains). Default: the features' own Set."""
    chars = images = audio = files = 0
    user_texts, other_texts = [], []
    for role, kind, t in _parts(messages):
        if kind == "text":
            chars += len(t)
            if t:
                (user_texts if role == "user" else other_texts).append(t)
        elif kind == "image":
            images += 1
        elif kind == "audio":
            audio += 1
        else:
            files += 1
    text = "\n".join(user_texts or other_texts)
    if type(max_chars) is not int or len(text) > max_chars:  # else _bounded would return text as is
        text = _bounded(text, max_chars)
    # (a question the bounded text does not end with, or all of it: the whole text is read)
    turn_chars = len(question) if question and len(question) < len(text) and text.endswith(question) else 0

    has_tools = isinstance(tools, (list, tuple)) and len(tools) > 0
    tokens = chars // 4 + 85 * images + (_tool_chars(tools) // 4 if has_tools else 0)
    bucket = "short" if tokens < 200 else "medium" if tokens < 2000 else "long" if tokens < 16000 else "very_long"
    if images or audio or files:  # else kinds would be ["text"] or [] below: "text" either way
        kinds = [k for k, present in (("text", chars), ("image", images), ("audio", audio), ("file", files))
                 if present]
        modality = "mixed" if len(kinds) > 1 else kinds[0]
    else:
        modality = "text"

    raw = _utf8(text)
    # hits: the matched entry numbers, read with list membership tests (see _CODE_I); with no
    # request_modalities, _requested's answer is written inline (it would only read the hits).
    hits = (((scan or _SET_MATCH)(raw)) or ()) if raw else ()
    if hits and (_FORMAT_I in hits or _MARK_I in hits):
        cleaned = clean_text(text, _FORMAT_I in hits, _MARK_I in hits)
        if cleaned != text:  # scanned again, as the patterns must see it
            text, raw = cleaned, _utf8(cleaned)
            hits = ((scan or _SET_MATCH)(raw) or ()) if raw else ()
    if hits:
        has_code = _CODE_I in hits or len(_WEAK_IDX.intersection(hits)) >= 3
        first = min(hits)
        task = _TASK_NAMES[first] if first < _N_TASKS else "coding" if has_code else "default"
        requested = (_requested(request_modalities, hits) if request_modalities is not None
                     else ("image",) if _IMAGE_I in hits else ("audio",) if _AUDIO_I in hits else ("text",))
    else:
        has_code = False
        task = "default"
        requested = _requested(request_modalities, hits) if request_modalities is not None else ("text",)

    f = RequestFeatures(task_type=task, has_code=has_code, is_creative=_CREATIVE_I in hits,
                        is_realtime=_REALTIME_I in hits, length_bucket=bucket, modality=modality,
                        requested_modalities=requested, input_tokens=tokens, has_tools=has_tools, text=text,
                        turn_chars=turn_chars)
    return f, hits
