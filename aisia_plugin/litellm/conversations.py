"""Conversation signals in the proxy (docs/signals.md#in-the-proxy): the answered turns of each
conversation kept in the state store, and the next turn's signals recorded as quality evidence
against the deployment that produced the answer they judge.

Two steps of a request's life, both run off its critical path (an asyncio task each; the hooks only
hand over references) and never failing it:

- ``Conversations.answered`` (the response headers, or a stream's success event): the answer is
  stored as a ``conversation.Turn`` (fingerprints, the deployment, alias and domain; never text)
  under the conversation's key, in a store list every worker and replica shares, living
  ``signals.conversation_ttl_s`` after its last answer and keeping ``signals.conversation_max_turns``.
- ``Conversations.opened`` (the pre-call hook, the call opened): when the request's history holds
  an answer, its stored turns are read and ``attribute`` (pure) says which stored answer the new
  message judges and with which signals. Each signal is recorded once per answer (a claim in the
  store: a regenerate or a re-sent complaint judges one answer once), within the key's bound per
  deployment (``signals.max_signals_per_key_hour``), as ``signal`` evidence.

Only the history's *stored* answers are ever judged: an assistant message a client wrote into the
history matches no stored fingerprint and moves nothing."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, fields
from typing import Any, Callable, Optional, Sequence

from ..conversation import (Caller, Judgement, Turn, answer_fingerprint, conversation_key, judge, judged_turn, new_user_text,
                            previous_user_text, prompt_fingerprint, tool_results)
from ..decision import learned_domain
from ..signals import (EMPTY_ANSWER, NO_COMPLAINT, REGENERATE, REPEATED_ANSWER, TRUNCATED, AnswerView, Signal,
                       content_text)

log = logging.getLogger("aisia_plugin.litellm")

MAX_PENDING = 1000  # conversation tasks in flight; past it a step is dropped (and logged), never queued
# Answers whose decision's prompt vector (``Decision.context``) is kept in this process, so that a
# signal about one teaches the contextual model that prompt (a few kB each; the oldest dropped).
MAX_CONTEXTS = 2048
RETRY_DELAYS_S = (0.05, 0.25)  # the previous turn may be a moment from the store (another process wrote it)
SIGNAL_BOUND_WINDOW_S = 3600.0  # the per-key bound's window (signals.max_signals_per_key_hour)
_TURN_FIELDS = tuple(f.name for f in fields(Turn) if f.name != "conversation")


@dataclass  # (treated as immutable, not frozen: built per request; as bandit.ArmStats)
class Attribution:
    """What a new request says of one stored answer: the turn and the signals read."""

    turn: Turn
    signals: tuple


def attribute(messages: Sequence, stored: Sequence[Turn], reader) -> Optional[Attribution]:
    """The stored answer a request judges and its signals, over plain data: a regenerate blames
    the answer it replaces; else the new user message is read (correction, dissatisfaction,
    satisfaction; a rephrase of the previous question) and, in an agent loop, the tool results of
    the answer's calls. None on a conversation's first turn (a one-shot prompt sent again is no
    regenerate: API clients repeat prompts; nor is a prompt whose earlier answers the client
    wrote, a few-shot one), when no stored answer matches (a client's own text),
    or when nothing was said in an agent loop's tool results. A new user message in which no
    signal is read is itself one: ``no_complaint`` (the user went on), weak evidence its weight
    says how far to count."""
    judged = judged_turn(messages)
    if judged is None:
        return None
    results = tool_results(messages)
    if results:  # an agent loop: its history up to the user message is no regenerate's
        turns = [t for t in stored if t.answer_fingerprint == judged.answer_fingerprint]
        found = Judgement(turns[-1], False) if turns else None
    else:
        found = judge(messages, stored, judged)
    if found is None:
        return None
    if found.regenerate:
        if not any(t.answer_fingerprint == judged.answer_fingerprint for t in stored):
            # The history's answers are the client's own (a few-shot prompt): the same job sent
            # again, as a one-shot prompt is, not a conversation's regenerate.
            return None
        return Attribution(found.turn, (Signal(REGENERATE, "", "the same history sent again"),))
    new_text = new_user_text(messages)
    said = list(reader.read_followup(new_text) if new_text else ())
    rephrase = reader.rephrase_of(new_text, previous_user_text(messages)) if new_text else None
    if rephrase is not None:
        said.append(rephrase)
    for content in results:
        error = reader.read_tool_result(content)
        if error is not None:
            said.append(error)
            break
    if not said and not results and new_text and new_text.strip():
        said.append(Signal(NO_COMPLAINT, "", "a new user message with no signal in it"))
    return Attribution(found.turn, tuple(said)) if said else None


def evidence_of(signal: Signal, weights) -> Optional[tuple]:
    """(value, weight factor) of a signal as quality evidence: 0 for a kind of negative weight, 1
    for a positive one, weighing the kind's weight's size; None for a kind weighted 0."""
    w = float(getattr(weights, signal.kind, 0.0) or 0.0)
    if w == 0.0:
        return None
    return (1.0 if w > 0 else 0.0), abs(w)


def caller_of(key_hash: Optional[str], user_api_key_dict) -> Caller:
    """The request's caller as LiteLLM's auth resolved it (never what the body claims)."""
    team = getattr(user_api_key_dict, "team_id", None)
    end_user = getattr(user_api_key_dict, "end_user_id", None)
    return Caller(key_hash or "", str(team) if team else "", str(end_user) if end_user else "")


def session_id_of(data) -> Optional[str]:
    """LiteLLM's session id when the client sent one (``litellm_session_id``, the
    ``x-litellm-session-id`` header); never one LiteLLM minted for the request."""
    meta = data.get("litellm_metadata") or data.get("metadata") or {}
    if isinstance(meta, dict) and meta.get("litellm_session_id_generated"):
        return None
    value = data.get("litellm_session_id")
    if not value:
        headers = (data.get("proxy_server_request") or {}).get("headers") or {}
        for k, v in headers.items():
            if isinstance(k, str) and k.lower() == "x-litellm-session-id":
                value = v
                break
    return str(value) if value else None


def answer_of(response) -> Optional[tuple]:
    """(content, tool calls as the next request's history carries them) of a chat response; None
    for anything else (a stream still running, an embedding)."""
    try:
        message = response.choices[0].message
    except (AttributeError, IndexError, TypeError):
        return None
    calls = []
    for call in getattr(message, "tool_calls", None) or ():
        function = getattr(call, "function", None)
        if function is not None:
            calls.append({"function": {"name": getattr(function, "name", None),
                                       "arguments": getattr(function, "arguments", None)}})
    content = getattr(message, "content", None)
    if content is None and not calls:
        if getattr(message, "audio", None) is not None or getattr(message, "function_call", None) is not None:
            return None  # an answer in another form than text (audio, a legacy function call): not read
        # No text and no call (a content filter's stop, a provider's empty reply): an empty answer,
        # as "" is; a structured-output refusal says why.
        refusal = getattr(message, "refusal", None)
        content = refusal if isinstance(refusal, str) else ""
    return content, calls


def _request_param(request, name: str):
    """A request parameter as the client sent it (the proxy's body, or LiteLLM's optional_params)."""
    value = request.get(name)
    if value is None:
        value = (request.get("optional_params") or {}).get(name)
    return value


def answer_view(request, response, answer: tuple) -> AnswerView:
    """What ``SignalReader.read_answer`` needs of an answer: its text, finish_reason, whether it
    called tools, whether the request asked for JSON (``response_format``)."""
    try:
        finish_reason = response.choices[0].finish_reason
    except (AttributeError, IndexError, TypeError):
        finish_reason = None
    fmt = _request_param(request, "response_format")
    kind = fmt.get("type") if isinstance(fmt, dict) else getattr(fmt, "type", None)
    content, calls = answer
    return AnswerView(content_text(content), finish_reason if isinstance(finish_reason, str) else None, bool(calls),
                      kind in ("json_object", "json_schema"))


def client_cut(request) -> bool:
    """Whether the client capped the answer's length itself (its own ``max_tokens``)."""
    return _request_param(request, "max_tokens") is not None or \
        _request_param(request, "max_completion_tokens") is not None


def answer_defects(reader, view: AnswerView, capped_by_client: bool, messages) -> tuple:
    """The signals an answer carries by itself (``read_answer``: refusal, empty, cut, invalid JSON,
    a repeat of the history's last answer). A cut the client asked for is the client's choice,
    not the deployment's defect."""
    previous = None
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == "assistant":
            previous = content_text(m.get("content"))
            break
    found = reader.read_answer(view, previous)
    if capped_by_client and found:
        # Cut at the client's own max_tokens: neither the cut nor what it left (nothing, when a
        # reasoning model spent the tokens thinking) is the deployment's defect.
        cut = (TRUNCATED, EMPTY_ANSWER) if view.finish_reason == "length" else (TRUNCATED,)
        found = tuple(s for s in found if s.kind not in cut)
    return found


def list_name(conversation: str) -> str:
    return f"conversation:{conversation}"


class Conversations:
    """The proxy's conversation tracking over a runtime's store, engine and policy (read when a
    step runs: a reload applies at once)."""

    def __init__(self, runtime, judge_of: Callable[[], Any] = lambda: None):
        self.runtime = runtime
        self.judge_of = judge_of
        # The startup's observability.Observer: signals counted by kind and language, each piece of
        # evidence a decision-log line (None: neither, as for a Router used without the proxy).
        self.observer = None
        self._tasks: set = set()
        self.dropped = 0
        # request id -> the answer's decision's context (insertion order: the oldest first)
        self._contexts: dict = {}

    # -- the request side: references handed over, the work in a task -----------------------------
    def opened(self, call, data, user_api_key_dict) -> None:
        """The pre-call hook opened `call`: who asks and in which conversation is noted on it; when
        the history holds an answer, its attribution runs in the background."""
        try:
            section = self.runtime.policy.signals
            messages = data.get("messages")
            if not section.enabled or not isinstance(messages, list) or not messages:
                return
            call.conversation = (caller_of(call.key, user_api_key_dict), session_id_of(data))
            if any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages):
                self._spawn(self._attribute(call.conversation, list(messages), call.request_id))
        except Exception:
            log.exception("aisia: reading a conversation failed (routing goes on)")

    def answered(self, call, request, response, deployment_id: Optional[str], decision) -> None:
        """`call` (its `request`: the proxy's body, or LiteLLM's kwargs) was answered by
        `deployment_id` with `response`: its turn is stored, and the answer's own defects
        recorded, in the background, once per call."""
        try:
            messages = request.get("messages") if isinstance(request, dict) else None
            if call.conversation is None or call.turn_noted or not deployment_id or not isinstance(messages, list):
                return
            answer = answer_of(response)
            if answer is None:
                return
            call.turn_noted = True
            self._keep_context(call.request_id, getattr(decision, "context", None))
            # What is read of the response and the request now: the stored turn's fields but those
            # the task reads of the history and the answer (fingerprints; defects too).
            record = {"deployment_id": str(deployment_id), "alias": call.alias, "domain": learned_domain(decision),
                      "request_id": call.request_id}
            self._spawn(self._note(call.conversation, list(messages), record, answer,
                                   answer_view(request, response, answer), client_cut(request)))
        except Exception:
            log.exception("aisia: storing a conversation turn failed")

    def _keep_context(self, request_id: str, context) -> None:
        """Keep the answer's prompt vector for the signals that will judge it (bounded)."""
        if context is None or not request_id:
            return
        kept = self._contexts
        kept[request_id] = context
        if len(kept) > MAX_CONTEXTS:
            del kept[next(iter(kept))]

    def context_of(self, turn: Turn):
        """The judged answer's decision context when this process served it (None otherwise:
        then the signal teaches the deployment's quality estimate only)."""
        return self._contexts.get(turn.request_id) if turn.request_id else None

    def _spawn(self, coro) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()
            return
        if len(self._tasks) >= MAX_PENDING:
            coro.close()
            self.dropped += 1
            log.warning("aisia: %d conversation steps in flight: one dropped", len(self._tasks))
            return
        task = loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for the steps in flight (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # -- the steps ----------------------------------------------------------------------------------
    async def _note(self, who, messages, record: dict, answer: tuple, view: AnswerView, capped: bool) -> None:
        """Store the answered turn (`record`: a ``Turn``'s fields as the store keeps them, completed
        here) and record the answer's own defects."""
        try:
            caller, session = who
            section = self.runtime.policy.signals
            key = conversation_key(caller, messages, session)
            record["turn_index"] = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
            record["prompt_fingerprint"] = prompt_fingerprint(messages)
            record["answer_fingerprint"] = answer_fingerprint(*answer)
            defects = answer_defects(self.runtime.engine.signal_reader, view, capped, messages)
            if any(s.kind == REPEATED_ANSWER for s in defects) and not await self._stored_answer(
                    key, messages, record["request_id"]):
                # The answer repeated is one the client wrote into the history: it moves nothing.
                defects = tuple(s for s in defects if s.kind != REPEATED_ANSWER)
            await self.runtime.store.add_to_list(list_name(key), record, section.conversation_ttl_s,
                                                 section.conversation_max_turns, caller.key_hash)
            if defects:
                await self._evidence(caller, Turn(key, **record), defects, section)
        except Exception:
            log.exception("aisia: storing a conversation turn failed")

    async def _stored_answer(self, key: str, messages, request_id: str) -> bool:
        """Whether the history's last assistant message is an answer the proxy stored for this
        conversation (by fingerprint), not one the client wrote."""
        for m in reversed(messages):
            if isinstance(m, dict) and m.get("role") == "assistant":
                fingerprint = answer_fingerprint(m.get("content"), m.get("tool_calls"))
                return any(t.answer_fingerprint == fingerprint for t in await self._stored(key, request_id))
        return False

    async def _stored(self, key: str, request_id: str) -> list:
        """The conversation's stored turns, oldest first, but the request's own (a judging step
        that waits for the previous turn may see the request's answer stored meanwhile)."""
        raw = await self.runtime.store.list_of(list_name(key))
        out = []
        for item in raw or ():
            try:
                turn = Turn(key, **{f: item[f] for f in _TURN_FIELDS if f in item})
            except (TypeError, KeyError):
                continue
            if turn.request_id != request_id:
                out.append(turn)
        return out

    async def _attribute(self, who, messages, request_id: str) -> None:
        try:
            caller, session = who
            rt = self.runtime
            section = rt.policy.signals
            key = conversation_key(caller, messages, session)
            reader = rt.engine.signal_reader  # (the policy's, built with its engine)
            found = attribute(messages, await self._stored(key, request_id), reader)
            for delay in RETRY_DELAYS_S:
                if found is not None:
                    break
                await asyncio.sleep(delay)
                found = attribute(messages, await self._stored(key, request_id), reader)
            if found is not None:
                await self._record(key, caller, found, section)
        except Exception:
            log.exception("aisia: attributing a conversation signal failed (routing goes on)")

    async def _record(self, key: str, caller: Caller, found: Attribution, section) -> None:
        store, turn = self.runtime.store, found.turn
        if all(evidence_of(s, section.weights) is None for s in found.signals):
            return  # every kind said weighs 0 (no_complaint by default): nothing to claim
        # Judged once: the first process to claim this answer records its signals. The claim
        # outlives the stored turn: a turn is pushed out of its conversation after
        # conversation_max_turns newer answers, each within conversation_ttl_s of the last.
        claim = await store.count_up(f"judged:{key}:{turn.turn_index}:{turn.answer_fingerprint}",
                                     section.conversation_ttl_s * (section.conversation_max_turns + 1))
        if claim != 1:
            return
        await self._evidence(caller, turn, found.signals, section)

    async def _evidence(self, caller: Caller, turn: Turn, signals: tuple, section) -> None:
        """Each signal about `turn`'s answer recorded as ``signal`` evidence against its deployment,
        within the caller's bound."""
        store, engine = self.runtime.store, self.runtime.engine
        source_weight = engine.quality.weight("signal")
        judge_runner = self.judge_of()
        for signal in signals:
            evidence = evidence_of(signal, section.weights)
            if evidence is None:
                continue
            # A hostile client's bound: its signals about one deployment count up to a cap per hour.
            spent = await store.count_up(f"signals:{caller.key_hash}:{turn.deployment_id}", SIGNAL_BOUND_WINDOW_S)
            if spent is None or spent > section.max_signals_per_key_hour:
                log.info("aisia: a %s signal about %s dropped: the key's bound per hour is reached", signal.kind,
                         turn.deployment_id)
                continue
            value, factor = evidence
            # The judged turn's domain and prompt vector, not the new turn's: the model learns per prompt.
            weight = factor * source_weight
            recorded = engine.record_quality(turn.deployment_id, turn.alias, turn.domain, value, "signal", weight,
                                             key=caller.key_hash or None, context=self.context_of(turn))
            if self.observer is not None and recorded is not None:
                self.observer.metrics.signal(signal.kind, signal.language)
                # The weight it counted with: the key's pull rule may have cut it.
                self.observer.evidence(turn.request_id, turn.deployment_id, alias=turn.alias, domain=turn.domain,
                                       source="signal", value=value, weight=recorded.weight, kind=signal.kind,
                                       language=signal.language)
            if judge_runner is not None and signal.kind != NO_COMPLAINT:  # agreement: what users said
                judge_runner.signalled(turn.answer_fingerprint, factor if value else -factor)
