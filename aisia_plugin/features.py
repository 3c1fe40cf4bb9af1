"""Request features from OpenAI-format messages (AISIA seed section 8).

Pure (no I/O) and linear-time: prompts are attacker-controlled, so there is no backtracking regex
here. Every keyword list and phrase (task types, creative, real-time, image/audio output requests,
code syntax) is one entry of a single RE2 set, so the prompt is scanned once, in linear time, and
the scan says which entries matched; character classes are counted with ``bytes.count``.

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

from collections.abc import Mapping
from dataclasses import dataclass, field

import re2

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

# One RE2 set: a single linear scan tells which of these matched anywhere in the prompt.
_SET = re2.Set.SearchSet(_OPT)
_IDX: dict[str, int] = {}
for _name, _pattern in [*zip(_TASK_NAMES, map(_words, _TASK_WORDS)), ("creative", _CREATIVE),
                        ("realtime", _REALTIME), ("image", _IMAGE_OUT), ("audio", _AUDIO_OUT),
                        ("code", _STRONG_CODE)] + [(f"weak{i}", re2.escape(w)) for i, w in enumerate(_WEAK_CODE)]:
    _IDX[_name] = _SET.Add(_pattern)
_SET.Compile()
_SET_MATCH = _SET._set.Match
_WEAK_IDX = frozenset(v for k, v in _IDX.items() if k.startswith("weak"))
_MODALITY_NAMES = frozenset(["text", "image", "audio", "video"])


@dataclass(frozen=True, slots=True)
class RequestFeatures:
    task_type: str = "default"
    has_code: bool = False
    is_creative: bool = False
    is_realtime: bool = False
    length_bucket: str = "short"
    modality: str = "text"
    requested_modalities: tuple[str, ...] = ("text",)
    input_tokens: int = 0
    has_tools: bool = False
    specificity: float = 0.0
    text: str = ""
    extra: Mapping[str, object] = field(default_factory=dict)
    estimate_probability: bool = False


def _parts(messages):
    """(role, kind, text) for every content part; odd shapes are skipped, never raised on."""
    if not isinstance(messages, (list, tuple)):
        return
    for m in messages:
        if not isinstance(m, Mapping):
            continue
        try:
            role = m.get("role")
            content = m.get("content")
        except Exception:  # a hostile Mapping
            continue
        role = role if isinstance(role, str) else ""
        if isinstance(content, str):
            yield role, "text", content
        elif isinstance(content, (list, tuple)):
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


def message_text(messages) -> str:
    """All the text of OpenAI-format messages, one part per line; never raises."""
    return "\n".join(t for _, kind, t in _parts(messages) if kind == "text" and t)


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
    if _IDX["image"] in hits:
        return ("image",)
    if _IDX["audio"] in hits:
        return ("audio",)
    return ("text",)


def _specificity(raw: bytes, has_code: bool) -> float:
    n = len(raw)
    classes = raw.translate(_CLASSES)  # one C pass: every byte replaced by its class letter
    blanks = classes.count(b" ")
    if not n or blanks >= n:
        return 0.0
    n_words = blanks + 1
    symbols, digits = classes.count(b"S"), classes.count(b"D")
    mean_len = classes.count(b"L") / n_words  # letters (and non-ASCII bytes) per word
    score = (0.35 * min(1.0, symbols / n / 0.05) + 0.15 * min(1.0, digits / n / 0.05)
             + 0.30 * min(1.0, max(0.0, (mean_len - 4.0) / 4.0)) + (0.20 if has_code else 0.0))
    if n_words < 8:
        score *= n_words / 8
    return round(min(1.0, max(0.0, score)), 4)


def extract_features(messages, tools=None, request_modalities=None, *, max_chars: int = 8000) -> RequestFeatures:
    """Features of one request. ``text`` is the user messages' text (latest last; all the text
    when there is no user message), bounded to ``max_chars`` keeping its start and its end; the
    detections run on that text. Never raises on odd message shapes."""
    chars = images = audio = 0
    user_texts, other_texts = [], []
    for role, kind, t in _parts(messages):
        if kind == "text":
            chars += len(t)
            if t:
                (user_texts if role == "user" else other_texts).append(t)
        elif kind == "image":
            images += 1
        else:
            audio += 1
    text = _bounded("\n".join(user_texts or other_texts), max_chars)

    has_tools = isinstance(tools, (list, tuple)) and len(tools) > 0
    tokens = chars // 4 + 85 * images + (_tool_chars(tools) // 4 if has_tools else 0)
    bucket = "short" if tokens < 200 else "medium" if tokens < 2000 else "long" if tokens < 16000 else "very_long"
    kinds = [k for k, present in (("text", chars), ("image", images), ("audio", audio)) if present]
    modality = "mixed" if len(kinds) > 1 else (kinds[0] if kinds else "text")

    raw = text.encode("utf-8", "replace")
    hits = set(_SET_MATCH(raw) or ()) if raw else set()
    has_code = _IDX["code"] in hits or len(hits & _WEAK_IDX) >= 3
    task = next((name for name in _TASK_NAMES if _IDX[name] in hits), "coding" if has_code else "default")
    return RequestFeatures(
        task_type=task, has_code=has_code, is_creative=_IDX["creative"] in hits,
        is_realtime=_IDX["realtime"] in hits, length_bucket=bucket, modality=modality,
        requested_modalities=_requested(request_modalities, hits),
        input_tokens=int(tokens), has_tools=has_tools, specificity=_specificity(raw, has_code), text=text,
    )
