"""Conversation identity and attribution (issue 40, docs/signals.md): pure functions over the
messages a chat client sends, and the small records the proxy keeps per turn.

Chat clients re-send the whole history each turn and rarely a session id. So a conversation is
named by who calls (the key's hash, the team, the end user) and how it began (the system
message and the first user message), or by the session id the caller sends
(``x-litellm-session-id`` / ``litellm_session_id``), always scoped to the caller: a client cannot
name another tenant's conversation and move its learning.

The next user turn judges the *previous* assistant turn (``judged_turn``): the last assistant
message before the new request's last user message. A regenerate (``is_regenerate``) re-sends the
same history up to the last user message: it blames the answer it replaces. Answers and prompts
are remembered by fingerprint only (``Turn``), never by their text.

The history is the client's word, not the proxy's: a judged turn is to count only when its
``answer_fingerprint`` is that of a ``Turn`` the proxy stored for the same conversation (a client
cannot blame a deployment for an answer it did not give, by writing one into the history), and
only once per stored turn (re-sending "that's wrong" ten times judges one answer once)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Optional, Sequence

from .signals import NEGATIVE_FOLLOWUP, content_text

_DIGEST_BYTES = 16  # 128-bit fingerprints: collisions are out of reach, and a Turn stays small
# A fingerprint's JSON of each part: json.dumps(part, sort_keys=True, ensure_ascii=False,
# separators=(",", ":"), default=str), whose bytes stored fingerprints hold (replicas of two
# versions share conversations), by one encoder (json.dumps builds one per call).
_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


@dataclass  # (treated as immutable, not frozen: built per request; as bandit.ArmStats)
class Caller:
    """Who sends a request, as LiteLLM's auth resolved it (never what the body claims)."""

    key_hash: str = ""
    team: str = ""
    end_user: str = ""


@dataclass(frozen=True)
class Turn:
    """One answered turn, what the proxy stores (bounded: short strings and an int) so that the
    next turn's signals reach the deployment that answered, with the prompt it answered."""

    conversation: str
    turn_index: int  # how many assistant answers the conversation held before this one
    deployment_id: str
    prompt_fingerprint: str  # the history up to and including the user message answered
    answer_fingerprint: str  # the answer's text (its tool calls when it has no text)
    alias: str = ""  # the alias that served it (the evidence is recorded under it)
    domain: Optional[str] = None  # the prompt's domain as the decision read it (per-domain quality)
    request_id: str = ""  # the proxy's id of the request it answered (a request never judges its own answer)


@dataclass  # (treated as immutable, not frozen: built per request; as bandit.ArmStats)
class JudgedTurn:
    """Which earlier answer a new request judges: the assistant message at ``message_index`` of
    the new request's messages, its ``turn_index`` and fingerprint (to find the stored ``Turn``)."""

    message_index: int
    turn_index: int
    answer_fingerprint: str


def _digest(*parts) -> str:
    h = hashlib.blake2b(digest_size=_DIGEST_BYTES)
    for part in parts:
        data = _JSON.encode(part)
        h.update(len(data).to_bytes(8, "big"))  # length-prefixed: ("ab", "c") != ("a", "bc")
        h.update(data.encode("utf-8", "replace"))
    return h.hexdigest()


def _role(message) -> str:
    return message.get("role", "") if isinstance(message, dict) else ""


def _calls(tool_calls) -> list:
    """The function part of each tool call (its id is the client's to regenerate); a value that is
    no list of calls (a hostile history's ``"tool_calls": 1``) holds none."""
    if not isinstance(tool_calls, (list, tuple)):
        return []
    return [(c.get("function") or {}) if isinstance(c, dict) else c for c in tool_calls]


def _essence(message) -> dict:
    """What identifies a message: its role, content and tool calls (not the ids or metadata a
    client may regenerate on each send)."""
    if not isinstance(message, dict):
        return {"role": "", "content": ""}
    out = {"role": _role(message), "content": message.get("content")}
    calls = _calls(message.get("tool_calls"))
    if calls:
        out["tool_calls"] = calls
    return out


def last_user_index(messages: Sequence) -> int:
    """The index of the last user message, -1 when there is none."""
    for i in range(len(messages) - 1, -1, -1):
        if _role(messages[i]) == "user":
            return i
    return -1


def conversation_key(caller: Caller, messages: Sequence, session_id: Optional[str] = None) -> str:
    """The conversation a request belongs to: the caller's session id when it sends one, else the
    system message(s) before the first user message and that first user message; both scoped
    to the caller (key hash, team, end user)."""
    scope = (caller.key_hash, caller.team, caller.end_user)
    if isinstance(session_id, str) and session_id.strip():
        return "s:" + _digest(scope, session_id.strip())
    opening = []
    for message in messages:
        opening.append(_essence(message))
        if _role(message) == "user":
            break
    return "c:" + _digest(scope, opening)


def prompt_fingerprint(messages: Sequence) -> str:
    """The history up to and including the last user message (what a regenerate re-sends)."""
    end = last_user_index(messages)
    return _digest([_essence(m) for m in messages[:end + 1]])


def answer_fingerprint(content, tool_calls=None) -> str:
    """An answer as it comes back in the next request's history: its text, else its tool calls."""
    text = content_text(content)
    calls = _calls(tool_calls)
    if text.strip() or not calls:
        return _digest(" ".join(text.split()))
    return _digest(calls)


def is_regenerate(earlier: Sequence, new: Sequence) -> bool:
    """Whether ``new`` asks again for the answer ``earlier`` got: both end their history with a
    user message and are the same up to it (a client's "regenerate"). An edited last message
    (same history, other text) is no regenerate: the rephrase signal reads it."""
    a, b = last_user_index(earlier), last_user_index(new)
    return a >= 0 and a == b and prompt_fingerprint(earlier) == prompt_fingerprint(new)


def judged_turn(messages: Sequence) -> Optional[JudgedTurn]:
    """The earlier answer the new request judges: the last assistant message before the last
    user message (or, in an agent loop whose request ends with tool results, the assistant
    message that called the tools). None on a conversation's first turn."""
    end = last_user_index(messages)
    if end < 0 or any(_role(m) == "tool" for m in messages[end + 1:]):
        end = len(messages)
    for i in range(end - 1, -1, -1):
        if _role(messages[i]) == "assistant":
            message = messages[i]
            turn = sum(1 for m in messages[:i] if _role(m) == "assistant")
            return JudgedTurn(i, turn, answer_fingerprint(message.get("content"), message.get("tool_calls")))
    return None


def previous_user_text(messages: Sequence) -> Optional[str]:
    """The user message before the last one (what a rephrase is compared with)."""
    end = last_user_index(messages)
    for i in range(end - 1, -1, -1):
        if _role(messages[i]) == "user":
            return content_text(messages[i].get("content"))
    return None


def new_user_text(messages: Sequence) -> Optional[str]:
    """The new user message: the last one, when nothing but tool results follows it (after an
    answer that called tools, an agent loop's step, it was read when it was new)."""
    end = last_user_index(messages)
    if end < 0 or any(_role(m) != "tool" for m in messages[end + 1:]):
        return None
    return content_text(messages[end].get("content"))


def question_text(messages: Sequence, reader) -> Optional[str]:
    """The text a conversation's request asks about, for its domain: the new user message alone
    (a new question after an answer is about itself, not about the conversation's earlier
    topics), or, when `reader` (a ``signals.SignalReader``) reads a correction or a
    dissatisfaction in it, the previous user message and it: "that's wrong" asks the previous
    question again. None when the request holds fewer than two user messages (its whole text is
    the question) or its new user message holds no text."""
    users = [i for i, m in enumerate(messages) if _role(m) == "user"]
    if len(users) < 2:
        return None
    new = content_text(messages[users[-1]].get("content"))
    if not new.strip():
        return None
    said = {signal.kind for signal in reader.read_followup(new)}
    if said & NEGATIVE_FOLLOWUP:
        return content_text(messages[users[-2]].get("content")) + "\n" + new
    return new


def tool_results(messages: Sequence) -> list:
    """The contents of the ``tool`` messages that end the request (an agent loop's results of the
    judged answer's tool calls)."""
    out = []
    for message in reversed(messages):
        if _role(message) != "tool":
            break
        out.append(message.get("content"))
    return out[::-1]


@dataclass  # (treated as immutable, not frozen: built per request; as bandit.ArmStats)
class Judgement:
    """The stored turn a new request judges, and whether the request is a regenerate of it."""

    turn: Turn
    regenerate: bool


def judge(messages: Sequence, stored: Sequence[Turn], judged: Optional[JudgedTurn] = None) -> Optional[Judgement]:
    """Which of the conversation's stored turns (oldest first) the new request judges:

    - a regenerate (its history up to the last user message is a stored turn's prompt): that turn,
      the answer it asks to replace (the latest one when the prompt was answered several times);
    - else the turn whose answer is the history's last assistant message before the new user
      message (``judged_turn``), the latest one when the same answer was given several times.

    None when no stored turn matches: a first turn, or an answer the proxy did not give (a
    client cannot have a deployment blamed for text it wrote into the history). `judged`: the
    request's ``judged_turn`` when the caller has read it already."""
    prompt = prompt_fingerprint(messages) if last_user_index(messages) >= 0 else None
    replaced: Optional[Turn] = None
    by_answer: dict[str, Turn] = {}  # answer fingerprint -> its latest turn
    for turn in stored:  # oldest first
        if turn.prompt_fingerprint == prompt:
            replaced = turn
        by_answer[turn.answer_fingerprint] = turn
    if replaced is not None:
        return Judgement(replaced, True)
    if judged is None:
        judged = judged_turn(messages)
    if judged is not None and judged.answer_fingerprint in by_answer:
        return Judgement(by_answer[judged.answer_fingerprint], False)
    return None
