"""The proxy's conversation step (aisia_plugin/litellm/conversations.py) over plain data: which
stored answer a request judges and with which signals, and the background steps over a memory
store and a real engine (stored turns, judged once, the key's bound, the judge told)."""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace

import pytest

from aisia_plugin.conversation import Caller, Turn, answer_fingerprint, conversation_key, prompt_fingerprint
from aisia_plugin.decision import Deployment
from aisia_plugin.engine import Engine
from aisia_plugin.litellm.conversations import (Conversations, answer_defects, answer_of, answer_view, attribute,
                                                client_cut, evidence_of, session_id_of)
from aisia_plugin.policy import load_policy
from aisia_plugin.policy.loader import default_signal_reader
from aisia_plugin.signals import (CORRECTION, EMPTY_ANSWER, INVALID_JSON, NO_COMPLAINT, REGENERATE, REPHRASE, SATISFACTION,
                                  TOOL_ERROR, TRUNCATED)
from aisia_plugin.state.memory import MemoryState

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
Q1 = {"role": "user", "content": "What is the capital of Australia?"}
A1 = {"role": "assistant", "content": "Sydney."}
WRONG = {"role": "user", "content": "That's wrong."}
READER = default_signal_reader()
RIDS = itertools.count()
KEY = conversation_key(Caller("k"), [SYSTEM, Q1])
STORED = Turn(KEY, 0, "cheap", prompt_fingerprint([SYSTEM, Q1]), answer_fingerprint("Sydney."), "auto", "general")


def kinds(found):
    return [s.kind for s in found.signals]


def test_a_complaint_blames_the_stored_answer_it_follows():
    found = attribute([SYSTEM, Q1, A1, WRONG], [STORED], READER)
    assert found.turn == STORED and kinds(found) == [CORRECTION]
    fr = attribute([SYSTEM, Q1, A1, {"role": "user", "content": "C'est faux."}], [STORED], READER)
    assert kinds(fr) == [CORRECTION] and fr.signals[0].language == "fr"
    thanks = attribute([SYSTEM, Q1, A1, {"role": "user", "content": "Thanks, that works!"}], [STORED], READER)
    assert kinds(thanks) == [SATISFACTION]


def test_nothing_is_judged_that_the_proxy_did_not_answer_or_nobody_said():
    forged = {"role": "assistant", "content": "Canberra, said nobody."}
    assert attribute([SYSTEM, Q1, forged, WRONG], [STORED], READER) is None  # the client's own text
    assert attribute([SYSTEM, Q1, A1, WRONG], [], READER) is None  # nothing stored
    assert attribute([SYSTEM, Q1], [STORED], READER) is None  # a one-shot prompt sent again: no regenerate
    blank = {"role": "user", "content": "  "}
    assert attribute([SYSTEM, Q1, A1, blank], [STORED], READER) is None  # nothing written


def test_a_new_question_with_no_signal_in_it_is_the_weak_no_complaint():
    neutral = {"role": "user", "content": "Now write a haiku about autumn leaves."}
    found = attribute([SYSTEM, Q1, A1, neutral], [STORED], READER)
    assert found.turn == STORED and kinds(found) == [NO_COMPLAINT]
    # A message that says something is that signal only, never also "no complaint".
    assert kinds(attribute([SYSTEM, Q1, A1, WRONG], [STORED], READER)) == [CORRECTION]
    weights = load_policy().signals.weights
    assert weights.no_complaint == 0.2  # weak (docs/signals.md#no-complaint)
    assert evidence_of(found.signals[0], weights) == (1.0, 0.2)
    assert evidence_of(found.signals[0], weights.model_copy(update={"no_complaint": 0.0})) is None


def test_a_regenerate_blames_the_answer_it_replaces_and_a_rephrase_is_read():
    second = Turn(KEY, 1, "frontier", prompt_fingerprint([SYSTEM, Q1, A1, WRONG]), answer_fingerprint("Canberra."))
    found = attribute([SYSTEM, Q1, A1, WRONG], [STORED, second], READER)
    assert found.turn == second and kinds(found) == [REGENERATE]
    again = {"role": "user", "content": "What's the capital city of Australia?"}
    assert kinds(attribute([SYSTEM, Q1, A1, again], [STORED], READER)) == [REPHRASE]


def test_a_tool_error_in_an_agent_loop_blames_the_call():
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]}
    turn = Turn(KEY, 0, "agent", prompt_fingerprint([SYSTEM, Q1]), answer_fingerprint(None, call["tool_calls"]))
    found = attribute([SYSTEM, Q1, call, {"role": "tool", "tool_call_id": "c1", "content": "Error: no city"}],
                      [turn], READER)
    assert found.turn == turn and kinds(found) == [TOOL_ERROR]


def test_evidence_values_and_weights_follow_the_policy():
    weights = load_policy().signals.weights
    (sig,) = attribute([SYSTEM, Q1, A1, WRONG], [STORED], READER).signals
    assert evidence_of(sig, weights) == (0.0, 1.0)
    (thanks,) = attribute([SYSTEM, Q1, A1, {"role": "user", "content": "thanks!"}], [STORED], READER).signals
    assert evidence_of(thanks, weights) == (1.0, weights.satisfaction)
    assert evidence_of(sig, weights.model_copy(update={"correction": 0.0})) is None


def test_the_session_id_is_the_clients_only_and_answers_are_read_as_the_history_carries_them():
    assert session_id_of({"litellm_session_id": "s1"}) == "s1"
    assert session_id_of({"proxy_server_request": {"headers": {"X-LiteLLM-Session-Id": "s2"}}}) == "s2"
    assert session_id_of({"litellm_session_id": "m", "metadata": {"litellm_session_id_generated": True}}) is None
    assert session_id_of({}) is None
    fn = SimpleNamespace(name="weather", arguments="{}")
    response = SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(
        content=None, tool_calls=[SimpleNamespace(function=fn)]))])
    content, calls = answer_of(response)
    assert answer_fingerprint(content, calls) == answer_fingerprint(
        None, [{"id": "x", "type": "function", "function": {"name": "weather", "arguments": "{}"}}])
    assert answer_of(object()) is None


class Judge:
    def __init__(self):
        self.seen = []

    def signalled(self, key, weight):
        self.seen.append((key, weight))


def runtime(policy=None):
    policy = policy or load_policy()
    store = MemoryState()
    return SimpleNamespace(policy=policy, store=store, engine=Engine(policy, store=store))


def signal_evidence(rt, dep):
    row = rt.store.stats().get(dep)
    return row["quality"]["evidence"]["signal"] if row else 0.0


def new_call():
    return SimpleNamespace(key="k", alias="auto", conversation=None, turn_noted=False, request_id=f"r{next(RIDS)}")


def sydney_answered(conv, *deployments):
    """Q1 asked and answered "Sydney." by the first of `deployments` (the others: the same call
    answered again, which stores nothing more)."""
    call = new_call()
    conv.opened(call, {"messages": [SYSTEM, Q1]}, None)
    answer = SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content="Sydney.", tool_calls=None))])
    conv.answered(call, {"messages": [SYSTEM, Q1]}, answer, deployments[0], SimpleNamespace(domain="general"))
    for dep in deployments[1:]:
        conv.answered(call, {"messages": [SYSTEM, Q1]}, answer, dep, None)


def test_the_steps_store_a_turn_and_record_its_judgement_once():
    async def run():
        rt = runtime()
        judge = Judge()
        conv = Conversations(rt, lambda: judge)
        sydney_answered(conv, "cheap", "other")  # stored once per call
        await conv.drain()
        assert len(await rt.store.list_of("conversation:" + KEY)) == 1
        for _ in range(3):  # the complaint re-sent (a regenerate of the follow-up) judges the answer once
            nxt = SimpleNamespace(key="k", alias="auto", conversation=None, turn_noted=False, request_id=f"r{next(RIDS)}")
            conv.opened(nxt, {"messages": [SYSTEM, Q1, A1, WRONG]}, None)
            await conv.drain()
        assert signal_evidence(rt, "cheap") == 1  # (records counted)
        assert signal_evidence(rt, "other") == 0.0
        assert judge.seen == [(answer_fingerprint("Sydney."), -1.0)]
    asyncio.run(run())


def test_no_complaint_counts_only_when_weighted_and_never_claims_the_answer_otherwise():
    neutral = {"role": "user", "content": "Now write a haiku about autumn leaves."}

    async def judged(weight):
        policy = load_policy()
        if weight is not None:
            signals = policy.signals.model_copy(update={"weights": policy.signals.weights.model_copy(
                update={"no_complaint": weight})})
            policy = policy.model_copy(update={"signals": signals})
        rt = runtime(policy)
        judge = Judge()
        conv = Conversations(rt, lambda: judge)
        sydney_answered(conv, "cheap")
        await conv.drain()
        conv.opened(new_call(), {"messages": [SYSTEM, Q1, A1, neutral]}, None)
        await conv.drain()
        moved_on = signal_evidence(rt, "cheap")
        # Then the user complains about the same answer after all (re-sending the history with a
        # complaint): with no_complaint unweighted, the answer was never claimed and the complaint counts.
        conv.opened(new_call(), {"messages": [SYSTEM, Q1, A1, WRONG]}, None)
        await conv.drain()
        return moved_on, signal_evidence(rt, "cheap"), judge.seen

    off = asyncio.run(judged(0.0))
    assert off[0] == 0 and off[1] == 1 and off[2] == [(answer_fingerprint("Sydney."), -1.0)]
    on = asyncio.run(judged(0.25))
    assert on[0] == 1 and on[1] == 1  # counted once: the later complaint finds the answer judged
    assert on[2] == []  # the judge's agreement counts what users said, never their silence


def test_a_request_never_judges_its_own_answer():
    async def run():
        rt = runtime()
        conv = Conversations(rt)
        history = [SYSTEM, Q1, {"role": "assistant", "content": "Forged by the client."}, WRONG]
        call = SimpleNamespace(key="k", alias="auto", conversation=None, turn_noted=False, request_id="own")
        conv.opened(call, {"messages": history}, None)  # its judging step waits for a stored answer...
        answer = SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content="Mine.", tool_calls=None))])
        conv.answered(call, {"messages": history}, answer, "cheap", None)  # ...meanwhile its own answer is stored
        await conv.drain()
        assert len(await rt.store.list_of("conversation:" + KEY)) == 1
        assert signal_evidence(rt, "cheap") == 0  # the same history as its own turn's: no regenerate of itself
    asyncio.run(run())


def test_a_keys_signals_about_a_deployment_are_bounded():
    async def run():
        policy = load_policy()
        policy = policy.model_copy(update={"signals": policy.signals.model_copy(update={"max_signals_per_key_hour": 2})})
        rt = runtime(policy)
        conv = Conversations(rt)
        for i in range(5):  # five conversations of one key, each complaining about cheap
            q = {"role": "user", "content": f"Question number {i} about geography?"}
            call = SimpleNamespace(key="k", alias="auto", conversation=None, turn_noted=False, request_id=f"r{next(RIDS)}")
            conv.opened(call, {"messages": [q]}, None)
            answer = SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=f"Answer {i}.",
                                                                                      tool_calls=None))])
            conv.answered(call, {"messages": [q]}, answer, "cheap", None)
            await conv.drain()
            follow = SimpleNamespace(key="k", alias="auto", conversation=None, turn_noted=False, request_id=f"r{next(RIDS)}")
            conv.opened(follow, {"messages": [q, {"role": "assistant", "content": f"Answer {i}."}, WRONG]}, None)
            await conv.drain()
        assert signal_evidence(rt, "cheap") == 2
        other = SimpleNamespace(key="k2", alias="auto", conversation=None, turn_noted=False, request_id=f"r{next(RIDS)}")
        q = {"role": "user", "content": "Another key's question?"}
        conv.opened(other, {"messages": [q]}, None)
        conv.answered(other, {"messages": [q]}, SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(
            content="Its answer.", tool_calls=None))]), "cheap", None)
        await conv.drain()
        follow = SimpleNamespace(key="k2", alias="auto", conversation=None, turn_noted=False, request_id=f"r{next(RIDS)}")
        conv.opened(follow, {"messages": [q, {"role": "assistant", "content": "Its answer."}, WRONG]}, None)
        await conv.drain()
        assert signal_evidence(rt, "cheap") == 3  # another key's own bound
    asyncio.run(run())


def reply(content, finish_reason="stop"):
    return SimpleNamespace(choices=[SimpleNamespace(finish_reason=finish_reason, message=SimpleNamespace(
        content=content, tool_calls=None))])


def defects(request, response):
    view = answer_view(request, response, answer_of(response))
    return [s.kind for s in answer_defects(READER, view, client_cut(request), request["messages"])]


def test_an_answers_own_defects_are_read_but_a_cut_the_client_asked_for_is_not():
    asked = {"messages": [Q1]}
    assert defects(asked, reply("Canberra.")) == []
    assert defects(asked, reply("")) == [EMPTY_ANSWER]
    assert defects(asked, reply("Canberra is", "length")) == [TRUNCATED]
    assert defects({**asked, "max_tokens": 3}, reply("Canberra is", "length")) == []
    assert defects({**asked, "optional_params": {"max_completion_tokens": 3}}, reply("Canberra is", "length")) == []
    wants_json = {**asked, "response_format": {"type": "json_object"}}
    assert defects(wants_json, reply("Sure! {not json")) == [INVALID_JSON]
    assert defects(wants_json, reply('{"capital": "Canberra"}')) == []


def test_an_empty_answer_is_evidence_against_its_deployment_once():
    async def run():
        rt = runtime()
        conv = Conversations(rt)
        before = rt.engine.quality_estimate("cheap")
        call = SimpleNamespace(key="k", alias="auto", conversation=None, turn_noted=False, request_id="e1")
        conv.opened(call, {"messages": [SYSTEM, Q1]}, None)
        conv.answered(call, {"messages": [SYSTEM, Q1]}, reply(""), "cheap", None)
        conv.answered(call, {"messages": [SYSTEM, Q1]}, reply(""), "cheap", None)  # once per call
        await conv.drain()
        assert signal_evidence(rt, "cheap") == 1
        assert rt.engine.quality_estimate("cheap") < before
    asyncio.run(run())


# -- what a conversation's request asks about (its domain) ------------------------------------------
MATH_Q = {"role": "user", "content": "Solve the equation 3x + 5 = 20 and compute the derivative of x^2."}
MATH_A = {"role": "assistant", "content": "x = 5; the derivative is 2x."}
GENERAL_Q = {"role": "user", "content": "Who was Ada Lovelace and why is she remembered?"}


def test_the_question_is_the_new_message_or_with_a_complaint_the_one_it_is_about():
    from aisia_plugin.conversation import question_text
    assert question_text([SYSTEM, MATH_Q], READER) is None  # one user message: the whole text is the question
    assert question_text([SYSTEM, MATH_Q, MATH_A, GENERAL_Q], READER) == GENERAL_Q["content"]
    for complaint in ("That's wrong.", "Non, c'est faux.", "Das stimmt nicht.", "Eso está mal."):
        asked = question_text([SYSTEM, MATH_Q, MATH_A, {"role": "user", "content": complaint}], READER)
        assert asked == MATH_Q["content"] + "\n" + complaint, complaint
    thanks = {"role": "user", "content": "Thanks, that works!"}
    assert question_text([SYSTEM, MATH_Q, MATH_A, thanks], READER) == thanks["content"]
    assert question_text([SYSTEM, MATH_Q, MATH_A, {"role": "user", "content": " "}], READER) is None


def test_a_general_question_after_a_math_one_is_learned_apart_from_math():
    from aisia_plugin.quality import OTHER_PROMPTS
    engine = Engine(load_policy())
    deps = [Deployment("only", "only", "openai/only", "openai")]
    first = engine.decide("auto", [SYSTEM, MATH_Q], deps)
    assert first.domain == "math"
    after = engine.decide("auto", [SYSTEM, MATH_Q, MATH_A, GENERAL_Q], deps)
    assert after.domain is None and after.context.domain == OTHER_PROMPTS  # not "math" from the history
    again = engine.decide("auto", [SYSTEM, MATH_Q, MATH_A, WRONG], deps)
    assert again.domain == "math"  # "that's wrong" asks the math question again


def test_the_words_the_model_reads_are_the_question_too():
    """The contextual model's prompt is what the request asks, as its domain is: on a new question
    after a math one it read the math question's words as well (the last two user messages), so a
    general question after a hard one looked hard (docs/quality.md#how-steady-it-is)."""
    from aisia_plugin.contextual import _text_of
    engine = Engine(load_policy())
    assert _text_of(engine.features([SYSTEM, MATH_Q, MATH_A, GENERAL_Q])) == GENERAL_Q["content"]
    assert _text_of(engine.features([SYSTEM, MATH_Q, MATH_A, WRONG])) == MATH_Q["content"] + "\n" + WRONG["content"]
    assert engine.features([SYSTEM, MATH_Q]).turn_chars == 0  # one user message: the whole text
    # The learned vector's words and bigrams (its first entries; the request's named features
    # last) are those of the new question asked alone, none of the math question's.
    deps = [Deployment("only", "only", "openai/only", "openai")]
    after = engine.decide("auto", [SYSTEM, MATH_Q, MATH_A, GENERAL_Q], deps).context.vector
    alone = engine.decide("auto", [SYSTEM, GENERAL_Q], deps).context.vector
    words = 2 * len(GENERAL_Q["content"].split()) - 1
    assert after.idx[:words].tolist() == alone.idx[:words].tolist()
    assert after.val[:words].tolist() == alone.val[:words].tolist()


def test_keys_and_fingerprints_keep_their_stored_values():
    """Replicas of two versions share conversations in the store during a rolling upgrade: a
    conversation key and the fingerprints are these bytes (non-ASCII text, content parts, tool
    calls, an object JSON cannot hold: read by str)."""
    class Odd:
        def __str__(self):
            return "odd"

    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1.5}"}}
    messages = [{"role": "system", "content": "Tu es concis. ✓"},
                {"role": "user", "content": "Quelle est la capitale de l'Australie ?", "name": "x"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "content": [{"type": "text", "text": "ok"}, {"type": "image_url", "image_url": {"url": "u"}}]},
                {"role": "user", "content": ["x", 3, 2.5, None, True, Odd()]}]
    caller = Caller("k", "team", "")
    assert conversation_key(caller, messages) == "c:58a6b3cb0e499f0285029c43cae05c3d"
    assert conversation_key(caller, messages, " sess ") == "s:15530830b84436b27b3573925f558370"
    assert prompt_fingerprint(messages) == "ee4fc3eb800bf25bb7df7b92bdc81c94"
    assert answer_fingerprint(" Sydney.\n") == "a80b9ff39a5f9fd9c32c78c36e1e1461"
    assert answer_fingerprint(None, [call]) == "25b0a7e2d76a5b80283386ad85af9c3d"


def test_a_history_whose_tool_calls_are_no_list_is_read_as_none_without_a_traceback(caplog):
    # The conversation step reads the client's body before LiteLLM validates it: `"tool_calls": 1`
    # was iterated, and the TypeError logged with a traceback on every such request (found by a
    # review). A value that is no list of calls holds none; a real list keeps its fingerprint.
    import logging

    assert answer_fingerprint("", 1) == answer_fingerprint("", None) == answer_fingerprint("")
    assert answer_fingerprint("", "abc") == answer_fingerprint("")
    calls = [{"id": "x", "function": {"name": "f", "arguments": "{}"}}]
    assert answer_fingerprint("", calls) == answer_fingerprint("", [{"id": "y", "function": calls[0]["function"]}]) \
        != answer_fingerprint("")

    async def run():
        rt = runtime()
        conv = Conversations(rt)
        with caplog.at_level(logging.DEBUG, logger="aisia_plugin"):
            for odd in (1, True, "abc", {"function": {}}):
                call = new_call()
                conv.opened(call, {"messages": [Q1, {"role": "assistant", "content": "Hi.", "tool_calls": odd},
                                                WRONG]}, None)
                conv.answered(call, {"messages": [Q1, {"role": "assistant", "content": "", "tool_calls": odd},
                                                  WRONG]}, reply("Canberra."), "cheap", None)
                await conv.drain()
    asyncio.run(run())
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert not tracebacks, [(r.getMessage(), r.exc_info[1]) for r in tracebacks]


def test_one_keys_flood_of_conversations_never_silences_another_keys_complaint():
    # On the memory store, one key's new conversations past the store's bound on lists dropped
    # the least recently written of all: another tenant's answer, then its complaint judged
    # nothing (found by two reviews). The flooding key's own go first now.
    def ask(conv, messages, answer=None, deployment="cheap", key="k"):
        call = SimpleNamespace(key=key, alias="auto", conversation=None, turn_noted=False, request_id=f"r{next(RIDS)}")
        conv.opened(call, {"messages": messages}, None)
        if answer is not None:
            conv.answered(call, {"messages": messages}, reply(answer), deployment, None)

    async def run():
        rt = runtime()
        rt.store.lists.limit = 300  # (20,000 in a proxy: the same rule, sooner)
        conv = Conversations(rt)
        ask(conv, [Q1], "Sydney.", "cheap", key="victim")
        await conv.drain()
        for i in range(2 * rt.store.lists.limit):
            ask(conv, [{"role": "user", "content": f"Prompt {i}"}], f"Answer {i}.", "frontier", key="hostile")
            if i % 100 == 0:
                await conv.drain()
        await conv.drain()
        ask(conv, [Q1, A1, WRONG], key="victim")
        await conv.drain()
        return signal_evidence(rt, "cheap")
    assert asyncio.run(run()) == 1


def test_the_evidence_line_carries_the_weight_the_key_share_let_count():
    # The decision log's evidence line wrote the signal's weight before the key's share rule cut
    # it: `aisia replay --logged` valued a bounded key's complaint in full (found by a review).
    class Observer:
        def __init__(self):
            self.lines = []
            self.metrics = SimpleNamespace(signal=lambda kind, language: None)

        def evidence(self, request_id, deployment_id, **fields):
            self.lines.append((deployment_id, fields["weight"]))

    async def run():
        rt = runtime()
        conv = Conversations(rt)
        conv.observer = Observer()
        for _ in range(30):  # another key's evidence about the deployment
            rt.engine.record_quality("cheap", "auto", None, 0.95, "feedback", key="peer")
        for i in range(12):  # this key's complaints: the first count in full, then the rule cuts them
            q = {"role": "user", "content": f"Question {i}?"}
            call = new_call()
            conv.opened(call, {"messages": [q]}, None)
            conv.answered(call, {"messages": [q]}, reply(f"Answer {i}."), "cheap", None)
            await conv.drain()
            conv.opened(new_call(), {"messages": [q, {"role": "assistant", "content": f"Answer {i}."}, WRONG]}, None)
            await conv.drain()
        return conv.observer.lines, rt.engine.key_pulls.weights("cheap", "k")[0]
    lines, counted = asyncio.run(run())
    weights = [w for dep, w in lines if dep == "cheap"]
    assert len(weights) == 12 and weights[0] == load_policy().quality.evidence.signal
    assert min(weights) < weights[0]  # cut by the pull rule, as written
    assert sum(weights) == pytest.approx(counted)
