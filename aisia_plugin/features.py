"""Request features from OpenAI-format messages (AISIA seed section 8). Pure and linear-time:
the prompts are attacker-controlled, so every pattern here is RE2 and every loop is bounded by
the input's size."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import re2

_OPT = re2.Options()
_OPT.case_sensitive = False
_OPT.log_errors = False


def _re(p: str):
    return re2.compile(p, _OPT)


_CODE = _re(r"```|\bdef \w+\(|\bclass \w+[:(]|\bfunction\s*\w*\(|\bimport \w+|#include|\bpublic static\b|=>|\};|\bconsole\.log\b|\bSELECT .+ FROM\b")
_CREATIVE = _re(r"\b(?:poem|poème|story|histoire|conte|novel|roman|lyrics|haiku|sonnet|screenplay|creative|slogan|fiction)\b")
_REALTIME = _re(r"\b(?:quick(?:ly)?|asap|urgent|real[- ]time|temps réel|autocomplete|rapidement|vite|immediately|tout de suite)\b")
_IMAGE_OUT = _re(r"\b(?:generate|create|draw|dessine|génère|genere|crée)\b.{0,40}\b(?:image|picture|illustration|drawing|logo|photo)\b|dall-?e|stable diffusion")
_AUDIO_OUT = _re(r"text to speech|\btts\b|synthèse vocale|read (?:it|this) aloud|lis (?:le|ce) texte à voix haute")
_TASKS = [
    ("debugging", _re(r"\b(?:debug|bug|error|exception|traceback|stack trace|fix|crash|erreur|corrige|plante)\b")),
    ("review", _re(r"\b(?:review|code review|relis|critique|audit)\b")),
    ("documentation", _re(r"\b(?:document(?:ation)?|docstring|readme|comment(?:s|aire)?)\b")),
    ("planning", _re(r"\b(?:plan|roadmap|design|architecture|strategy|stratégie|étapes|steps to)\b")),
    ("coding", _re(r"\b(?:code|function|fonction|class|script|implement|implémente|program|programme|python|javascript|typescript|java|rust|golang|sql|api|regex)\b")),
    ("analysis", _re(r"\b(?:analy[sz]e|analyse|compare|evaluate|évalue|explain why|explique pourquoi|assess)\b")),
]
_TECH = _re(r"\b(?:\w+\(\)|\w+\.\w+\(|v?\d+\.\d+(?:\.\d+)?|[A-Z]{2,}\d*|\w+_\w+)\b")


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
    """(kind, text) for every content part; odd shapes are skipped, never raised on."""
    if not isinstance(messages, (list, tuple)):
        return
    for m in messages:
        if not isinstance(m, dict):
            continue
        role = m.get("role") if isinstance(m.get("role"), str) else "user"
        content = m.get("content")
        if isinstance(content, str):
            yield role, "text", content
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    continue
                kind = part.get("type")
                if kind == "text" and isinstance(part.get("text"), str):
                    yield role, "text", part["text"]
                elif kind in ("image_url", "image", "input_image"):
                    yield role, "image", ""
                elif kind in ("input_audio", "audio"):
                    yield role, "audio", ""


def message_text(messages) -> str:
    return "\n".join(t for _, kind, t in _parts(messages) if kind == "text" and t)


def _bounded(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    return text[:half] + "\n" + text[-half:]


def extract_features(messages, tools=None, request_modalities=None, *, max_chars: int = 8000) -> RequestFeatures:
    chars = 0
    images = audio = 0
    user_texts = []
    for role, kind, text in _parts(messages):
        if kind == "text":
            chars += len(text)
            if role == "user":
                user_texts.append(text)
        elif kind == "image":
            images += 1
        else:
            audio += 1
    text = _bounded("\n".join(user_texts) if user_texts else message_text(messages), max_chars)
    tool_chars = 0
    if isinstance(tools, list) and tools:
        tool_chars = len(repr(tools)[:1_000_000])
    tokens = chars // 4 + 85 * images + 100 * audio + tool_chars // 4
    bucket = "short" if tokens < 200 else "medium" if tokens < 2000 else "long" if tokens < 16000 else "very_long"
    kinds = (["text"] if chars else []) + (["image"] if images else []) + (["audio"] if audio else [])
    modality = "mixed" if len(kinds) > 1 else (kinds[0] if kinds else "text")
    requested = []
    if isinstance(request_modalities, (list, tuple)):
        requested = [str(m) for m in request_modalities if isinstance(m, str)]
    if not requested:
        requested = ["text"]
        if _IMAGE_OUT.search(text):
            requested = ["image"]
        elif _AUDIO_OUT.search(text):
            requested = ["audio"]
    has_code = bool(_CODE.search(text))
    task = "default"
    for name, rx in _TASKS:
        if rx.search(text):
            task = name
            break
    if task == "default" and has_code:
        task = "coding"
    # Specificity: share of technical tokens (identifiers, versions, acronyms, calls) among
    # words, saturating at 1; code counts as highly specific.
    words = max(1, text.count(" ") + 1)
    tech = len(_TECH.findall(text[:4000]))
    specificity = min(1.0, tech / max(1.0, min(words, 1000) / 10.0) + (0.3 if has_code else 0.0))
    return RequestFeatures(
        task_type=task, has_code=has_code, is_creative=bool(_CREATIVE.search(text)),
        is_realtime=bool(_REALTIME.search(text)), length_bucket=bucket, modality=modality,
        requested_modalities=tuple(requested), input_tokens=int(tokens), has_tools=bool(tools),
        specificity=round(specificity, 4), text=text,
    )
