"""What a client cannot make count (litellm/conversations.py, docs/signals.md "Once" and "A
hostile client's bound"): an answer judged twice over time, a key's hourly bound dropped by other
tenants' traffic, an assistant message the client wrote, a cut the client asked for, an earlier
complaint read again in an agent loop, an answer with no content read as none, a few-shot prompt sent again read as a regenerate. Pure units
over a memory store and a real engine (no proxy). Found by a review."""

from __future__ import annotations

import asyncio
import itertools
import time
from types import SimpleNamespace

from aisia_plugin.conversation import Caller, Turn, answer_fingerprint, conversation_key, prompt_fingerprint
from aisia_plugin.engine import Engine
from aisia_plugin.litellm.conversations import Conversations, answer_defects, answer_of, answer_view, attribute, client_cut
from aisia_plugin.policy.loader import default_signal_reader
from aisia_plugin.signals import CORRECTION
from aisia_plugin.policy import load_policy
from aisia_plugin.state import memory
from aisia_plugin.state.memory import MemoryState

READER = default_signal_reader()
RIDS = itertools.count()
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
Q1 = {"role": "user", "content": "What is the capital of Australia?"}
A1 = {"role": "assistant", "content": "Sydney."}
WRONG = {"role": "user", "content": "That's wrong."}


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def reply(content, finish_reason="stop"):
    return SimpleNamespace(choices=[SimpleNamespace(finish_reason=finish_reason, message=SimpleNamespace(
        content=content, tool_calls=None))])


def runtime(**signals):
    policy = load_policy()
    if signals:
        policy = policy.model_copy(update={"signals": policy.signals.model_copy(update=signals)})
    store = MemoryState()
    return SimpleNamespace(policy=policy, store=store, engine=Engine(policy, store=store))


def new_call(key="k"):
    return SimpleNamespace(key=key, alias="auto", conversation=None, turn_noted=False, request_id=f"rv{next(RIDS)}")


def signal_evidence(rt, dep):
    row = rt.store.stats().get(dep)
    return row["quality"]["evidence"]["signal"] if row else 0.0


UNANSWERED = object()


def ask(conv, messages, answer=UNANSWERED, deployment="cheap", key="k", finish_reason="stop", **body):
    """One request: opened (its judging step) and, given an `answer`, answered by `deployment`."""
    call = new_call(key)
    data = {"messages": messages, **body}
    conv.opened(call, data, None)
    if answer is not UNANSWERED:
        conv.answered(call, data, reply(answer, finish_reason), deployment, None)
    return call


def test_a_stored_answer_is_judged_once_while_its_conversation_keeps_it(monkeypatch):
    """docs/signals.md, Once: "Each stored answer is judged once". The claim lives
    conversation_ttl_s from the *first judgement*, the stored turns conversation_ttl_s from the
    conversation's *last answer*: in a conversation still going after an hour, the first answer
    is still stored, its claim has expired, and a complaint about it (worded anew, so no
    regenerate) judges it a second time."""
    clock = [1000.0]
    monkeypatch.setattr(memory, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time))

    async def run():
        rt = runtime()
        conv = Conversations(rt)
        ask(conv, [SYSTEM, Q1], "Sydney.", "cheap")
        await conv.drain()
        clock[0] += 10
        ask(conv, [SYSTEM, Q1, A1, WRONG], "Canberra.", "frontier")  # judges cheap's answer: 1
        await conv.drain()
        assert signal_evidence(rt, "cheap") == 1
        clock[0] += 3000  # the conversation goes on: its list lives an hour from this answer
        ask(conv, [SYSTEM, Q1, A1, WRONG, assistant("Canberra."), user("And of New Zealand?")], "Wellington.",
            "frontier")
        await conv.drain()
        clock[0] += 700  # 3710 s after the first judgement, 700 s after the last answer
        assert any(t["answer_fingerprint"] == answer_fingerprint("Sydney.")
                   for t in await rt.store.list_of("conversation:" + conversation_key(Caller("k"), [SYSTEM, Q1])))
        ask(conv, [SYSTEM, Q1, A1, user("That's wrong!")])  # the same stored answer, judged again
        await conv.drain()
        return signal_evidence(rt, "cheap")
    assert asyncio.run(run()) == 1


def test_a_keys_hourly_signal_bound_survives_other_tenants_traffic():
    """docs/signals.md: "a single API key's signals about one deployment count as evidence at most
    signals.max_signals_per_key_hour times (20 by default) per hour". On the memory store (the
    default backend) the bound's counter shares ExpiringCounts (100,000 names, past which the
    *oldest* live counter is dropped) with every conversation's judged: claim: 100,000 follow-ups
    of other tenants within the hour (28 a second) drop the hostile key's counter, and its next
    complaints count again (40 in the hour, not 20)."""
    async def run():
        rt = runtime()
        conv = Conversations(rt)

        async def complain(i):
            q = user(f"Question number {i} about geography?")
            ask(conv, [q], f"Answer {i}.", "cheap", key="hostile")
            await conv.drain()
            ask(conv, [q, assistant(f"Answer {i}."), WRONG], key="hostile")
            await conv.drain()

        for i in range(25):
            await complain(i)
        assert signal_evidence(rt, "cheap") == 20  # the bound holds
        for i in range(rt.store.counts.limit):  # other tenants' follow-ups claim their answers
            await rt.store.count_up(f"judged:c:other{i}:0:f", 3600.0)
        for i in range(25, 50):
            await complain(i)
        return signal_evidence(rt, "cheap")
    assert asyncio.run(run()) == 20


def test_counters_are_bounded_per_kind_so_one_kinds_flood_drops_none_of_another(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(memory, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    counts = memory.ExpiringCounts(limit=3)
    counts.count_up("session-revoked:s1", 100.0)
    counts.count_up("signals:k:cheap", 100.0)
    for i in range(10):  # other tenants' claims, past the bound of their kind
        counts.count_up(f"judged:c{i}:0:f", 50.0)
    assert counts.counted("session-revoked:s1") == 1 and counts.counted("signals:k:cheap") == 1
    assert [counts.counted(f"judged:c{i}:0:f") for i in range(10)] == [0] * 7 + [1] * 3  # the oldest went
    clock[0] = 60.0  # the claims expired: a new one takes the place of the expired, not of a live one
    counts.count_up("judged:new:0:f", 50.0)
    assert counts.counted("judged:new:0:f") == 1 and counts.counted("session-revoked:s1") == 1


def test_an_empty_answer_cut_by_the_clients_own_max_tokens_is_not_blamed():
    """answer_defects: "A cut the client asked for is the client's choice, not the deployment's
    defect" (docs/signals.md: "is not counted"). A reasoning model given max_tokens=16 spends them
    thinking and returns "" with finish_reason length: the cut is the client's, yet the same cut
    is read as an empty_answer (weight -1.0, the strongest) against the deployment."""
    request = {"messages": [Q1], "max_tokens": 16}
    response = reply("", "length")
    view = answer_view(request, response, answer_of(response))
    found = [s.kind for s in answer_defects(READER, view, client_cut(request), request["messages"])]
    assert found == []

    # Not asked for by the client (no max_tokens), or not cut: an empty answer is the deployment's.
    for body, finish in (({"messages": [Q1]}, "length"), ({"messages": [Q1], "max_tokens": 16}, "stop")):
        response = reply("", finish)
        found = answer_defects(READER, answer_view(body, response, answer_of(response)), client_cut(body), [Q1])
        assert "empty_answer" in [s.kind for s in found]


def test_a_repeat_of_an_assistant_message_the_client_wrote_moves_nothing():
    """docs/signals.md (a hostile client's bound): "an assistant message a client writes into the
    history matches no stored fingerprint and moves nothing". The repeated_answer defect compares
    the new answer with the history's last assistant message whatever wrote it: a client forges
    one and asks for the same text, and the deployment is blamed for "repeating" it."""
    async def run():
        rt = runtime()
        conv = Conversations(rt)
        text = "The capital of Australia is Canberra, a planned city chosen as a compromise in 1908."
        forged = [SYSTEM, Q1, assistant(text), user("Please say exactly the same thing again.")]
        ask(conv, forged, text, "cheap")  # the deployment did what it was asked
        await conv.drain()
        return signal_evidence(rt, "cheap")
    assert asyncio.run(run()) == 0.0


    async def kinds(first_answered: bool):  # the same request, the repeated answer the proxy's own or not
        rt = runtime()
        conv = Conversations(rt)
        said = []
        conv.observer = SimpleNamespace(metrics=SimpleNamespace(signal=lambda kind, language: said.append(kind)),
                                        evidence=lambda *a, **k: None)
        text = "The capital of Australia is Canberra, a planned city chosen as a compromise in 1908."
        if first_answered:
            ask(conv, [SYSTEM, Q1], text, "cheap")
            await conv.drain()
        ask(conv, [SYSTEM, Q1, assistant(text), user("Please say exactly the same thing again.")], text, "cheap")
        await conv.drain()
        return said
    assert "repeated_answer" in asyncio.run(kinds(True)) and asyncio.run(kinds(False)) == []


def test_an_agent_loops_tool_results_do_not_reread_the_earlier_user_message():
    """attribute(): "in an agent loop, the tool results of the answer's calls" judge it;
    conversation.new_user_text: "the last one, when nothing but tool results follows it". In
    [.., A1, "That's wrong ...", tool call, tool result] an assistant message follows the user's
    complaint: the complaint was about A1 (judged when it was sent) and must not blame the tool
    call the *next* deployment made, nor count a second time."""
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]}
    ok = {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 12, \"sky\": \"rain\"}"}
    q = user("What's the weather in Paris?")
    a = assistant("It is sunny.")
    complaint = user("That's wrong, check the weather tool.")
    key = conversation_key(Caller("k"), [SYSTEM, q])
    first = Turn(key, 0, "cheap", prompt_fingerprint([SYSTEM, q]), answer_fingerprint("It is sunny."), "auto")
    tool_turn = Turn(key, 1, "frontier", prompt_fingerprint([SYSTEM, q, a, complaint]),
                     answer_fingerprint(None, call["tool_calls"]), "auto")
    found = attribute([SYSTEM, q, a, complaint, call, ok], [first, tool_turn], READER)
    # A tool result that says nothing wrong: no signal about the tool call at all.
    assert found is None or CORRECTION not in [s.kind for s in found.signals], (
        f"the earlier complaint blamed {found.turn.deployment_id}'s tool call: {found.signals}")


def test_an_answer_with_no_content_and_no_tool_call_is_an_empty_answer():
    """docs/signals.md: empty_answer fires when "no text and no tool call", weight -1.0. A chat
    response whose message content is None (an Azure content filter, a provider's empty reply)
    and has no tool call is that, but answer_of() reads it as no answer at all: no empty_answer
    is recorded and the turn is not stored (a complaint or a regenerate after it judges nothing),
    while the same answer with content "" is blamed."""
    async def run(content):
        rt = runtime()
        conv = Conversations(rt)
        ask(conv, [SYSTEM, Q1], content, "cheap", finish_reason="content_filter")
        await conv.drain()
        return signal_evidence(rt, "cheap")
    assert asyncio.run(run("")) == 1
    assert asyncio.run(run(None)) == 1
    # An audio answer (no text, the sound in message.audio) is not read as an empty one.
    audio = SimpleNamespace(choices=[SimpleNamespace(finish_reason="stop", message=SimpleNamespace(
        content=None, tool_calls=None, audio={"id": "a1", "data": "UklGR..."}))])
    assert answer_of(audio) is None


def test_a_repeated_few_shot_prompt_is_no_regenerate():
    """attribute(): "None on a conversation's first turn (a one-shot prompt sent again is no
    regenerate: API clients repeat prompts)". A one-shot prompt with few-shot examples (assistant
    messages the client wrote, never an answer of the proxy's) sent again by an API client is
    read as a regenerate: the previous answer, which the client never saw as a conversation's
    turn, is blamed (-0.7) each time."""
    async def run():
        rt = runtime()
        conv = Conversations(rt)
        prompt = [SYSTEM, user("Classify the sentiment: I love this phone."), assistant("positive"),
                  user("Classify the sentiment: The battery died after an hour.")]
        ask(conv, prompt, "negative", "cheap")
        await conv.drain()
        ask(conv, list(prompt), "negative", "frontier")  # the same job again (a batch, a retry)
        await conv.drain()
        return signal_evidence(rt, "cheap")
    assert asyncio.run(run()) == 0.0


def test_a_regenerate_in_a_conversation_still_blames_the_answer_it_replaces():
    async def run():
        rt = runtime()
        conv = Conversations(rt)
        ask(conv, [SYSTEM, Q1], "Sydney.", "cheap")
        await conv.drain()
        second = [SYSTEM, Q1, A1, user("And of New Zealand?")]
        ask(conv, second, "Auckland.", "cheap")
        await conv.drain()
        before = signal_evidence(rt, "cheap")
        ask(conv, list(second), "Wellington.", "frontier")  # the user asks for another answer
        await conv.drain()
        return before, signal_evidence(rt, "cheap")
    before, after = asyncio.run(run())
    assert after == before + 1
