"""What a request needs of a deployment, what a deployment can take, and who is left out
(docs/capabilities.md).

Pure: a request's needs are read from its body (the messages' parts, as features.py classifies
them, its tools, its ``response_format``, its reasoning parameters); a deployment's capabilities
were set when it was built (its annotation, else LiteLLM's model info: litellm/costs.py). Only
a deployment known NOT to have a needed capability is left out: one whose capability is unknown
(a model LiteLLM's map does not list, not annotated) stays a candidate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Iterable, Optional

from .features import content_kinds

# The capabilities, in the order they are named, each with LiteLLM's model-info key and what in a
# request needs it.
CAPABILITIES = ("vision", "audio_input", "pdf_input", "function_calling", "response_schema", "reasoning",
                "audio_output")
LITELLM_KEYS = {name: f"supports_{name}" for name in CAPABILITIES}
NEEDED_FOR = {"vision": "images in the messages", "audio_input": "audio in the messages",
              "pdf_input": "a file (PDF) in the messages", "function_calling": "tools",
              "response_schema": "a response_format with a JSON schema",
              "reasoning": "reasoning parameters", "audio_output": "an audio answer (modalities)"}
# The content part kinds of features.py, and the capability each needs.
_PART_NEEDS = {"image": "vision", "audio": "audio_input", "file": "pdf_input"}
# Request fields that ask for reasoning (OpenAI's reasoning_effort, Anthropic's thinking, the
# Responses API's reasoning): a non-null value needs a reasoning model.
REASONING_FIELDS = ("reasoning_effort", "thinking", "reasoning")
NO_NEEDS: frozenset = frozenset()


def _wants_schema(response_format) -> bool:
    """Whether a ``response_format`` asks for output that follows a JSON schema (a plain
    ``json_object`` does not: every chat model can be told to answer JSON)."""
    return isinstance(response_format, Mapping) and response_format.get("type") == "json_schema"


def request_needs(features, messages, tools=None, body: Optional[Mapping] = None) -> frozenset:
    """The capabilities a request needs (a frozenset of CAPABILITIES names; empty for a plain
    text request). `features`: its ``RequestFeatures`` (its ``modality`` says whether the
    messages hold anything but text, so a text request costs no second pass over them);
    `tools`: its tools; `body`: the rest of the request (``response_format``, ``functions``,
    the REASONING_FIELDS, ``modalities``). What the prompt's words seem to ask for
    (``RequestFeatures.requested_modalities``, "draw me a cat") is a guess and never filters.
    Never raises on odd shapes: they need nothing."""
    # Truthiness first, then the type: this runs for every alias request, and a plain text
    # request (the proxy's body is large) should cost a few lookups.
    needs = []
    if features.modality != "text":
        needs.extend(_PART_NEEDS[k] for k in content_kinds(messages) if k in _PART_NEEDS)
    if tools and isinstance(tools, (list, tuple)):
        needs.append("function_calling")
    if type(body) is dict or isinstance(body, Mapping):
        get = body.get
        listed = get("tools") or get("functions")
        if listed and isinstance(listed, (list, tuple)):
            needs.append("function_calling")
        shape = get("response_format")
        if shape and _wants_schema(shape):
            needs.append("response_schema")
        if get("reasoning_effort") or get("thinking") or get("reasoning"):  # REASONING_FIELDS, set
            needs.append("reasoning")
        modalities = get("modalities")
        if modalities and isinstance(modalities, (list, tuple)) and "audio" in modalities:
            needs.append("audio_output")
    return frozenset(needs) if needs else NO_NEEDS


def ordered(names: Iterable[str]) -> list[str]:
    """Capability names in CAPABILITIES order."""
    names = set(names)
    return [n for n in CAPABILITIES if n in names]


def missing(deployment, needs: frozenset) -> list[str]:
    """The needed capabilities the deployment is known not to have (CAPABILITIES order)."""
    caps = deployment.capabilities
    return [n for n in CAPABILITIES if n in needs and caps.get(n) is False]


def why_not(deployment, lacks: list[str]) -> str:
    """The explain row of a deployment left out for lacking `lacks`."""
    sources = deployment.capability_sources
    return "cannot take " + "; ".join(
        f"{NEEDED_FOR[n]} (no {n}: {sources.get(n) or 'declared'})" for n in lacks)


def lacking(deployments, needs: frozenset) -> dict:
    """id -> why, for each deployment known not to have a capability the request needs."""
    out = {}
    for d in deployments:
        lacks = missing(d, needs)
        if lacks:
            out[d.id] = why_not(d, lacks)
    return out


def refusal(needs: frozenset, deployments) -> str:
    """Why an alias none of whose candidates can take the request refuses it: the capabilities
    it needs that some candidate lacks, and who lacks what."""
    short = [n for n in ordered(needs) if any(missing(d, frozenset([n])) for d in deployments)]
    what = ", ".join(f"{n} ({NEEDED_FOR[n]})" for n in short)
    who = "; ".join(f"{d.id} lacks {', '.join(missing(d, needs))}" for d in deployments)
    return f"no candidate can take this request: it needs {what}; {who}"


@dataclass(frozen=True)
class Gap:
    """A capability an alias requires (its ``requires:``) that none of its candidates is known
    to have: `lacking` are known not to, `unknown` may."""

    alias: str
    capability: str
    lacking: tuple
    unknown: tuple

    def message(self) -> str:
        if self.unknown:
            return (f"alias {self.alias!r} requires {self.capability}, and none of its candidates is known to "
                    f"have it (unknown: {', '.join(self.unknown)}; "
                    f"lacking: {', '.join(self.lacking) or 'none'}): declare it with an annotation's "
                    f"capabilities: if they have it")
        return (f"alias {self.alias!r} requires {self.capability}, and none of its candidates has it "
                f"({', '.join(self.lacking) or 'no candidate'}): requests needing it are refused with a 400")


def gaps(alias: str, requires: Iterable[str], candidates) -> list[Gap]:
    """The capabilities an alias requires that none of its `candidates` is known to have."""
    out = []
    for name in ordered(requires):
        if any(d.capabilities.get(name) is True for d in candidates):
            continue
        out.append(Gap(alias, name, tuple(d.id for d in candidates if d.capabilities.get(name) is False),
                       tuple(d.id for d in candidates if d.capabilities.get(name) is None)))
    return out


def merged(*layers: tuple) -> tuple[dict, dict]:
    """Capabilities and their sources from (source, mapping) layers, the first that names a
    capability winning: (name -> bool, name -> source)."""
    caps, sources = {}, {}
    for source, values in layers:
        if not isinstance(values, Mapping):
            continue
        for name in CAPABILITIES:
            value = values.get(name)
            if name not in caps and isinstance(value, bool):
                caps[name], sources[name] = value, source
    return caps, sources
