"""The demo's conversing users (aisia_plugin/demo/conversing.py) and what the demo prints of their
run (aisia_plugin/demo/report.py), without a proxy: what they say reads as the signal they mean
under the shipped lexicons, in English and in French; their requests are a chat client's (a
system message, the whole history, a regenerate re-sends it); each conversation opens with its
own message; the frontier shares and the "learned without feedback" line follow the turns."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from aisia_plugin.demo import conversing as cv
from aisia_plugin.demo.report import (candidates_by_alias, frontier_shares, frontier_table, learned_how,
                                      parse_signal_metrics)
from aisia_plugin.demo.scenario import Outcome
from aisia_plugin.policy import detect_domain, load_policy
from aisia_plugin.signals import NEGATIVE_FOLLOWUP, SATISFACTION, reader_for

READER = reader_for(load_policy().signals)
QUESTION = "Write a Python function that merges 7 sorted lists and add unit tests"


def _kinds(text: str) -> set:
    return {s.kind for s in READER.read_followup(text)}


def _languages(text: str) -> set:
    return {s.language for s in READER.read_followup(text)}


@pytest.mark.parametrize("language", ["en", "fr"])
def test_what_the_users_say_reads_as_the_signal_they_mean(language):
    for complaint in cv.COMPLAINTS[language]:
        said = f"{complaint} {cv.ASK_AGAIN[language].format(q=QUESTION)}"  # as next_turn writes it
        assert _kinds(said) & NEGATIVE_FOLLOWUP and SATISFACTION not in _kinds(said), said
        assert _languages(said) == {language}, said
    for thanks in cv.THANKS[language]:
        assert _kinds(thanks) == {SATISFACTION} and _languages(thanks) == {language}, thanks
    said = cv.THANK_AND_ASK[language].format(q=QUESTION)
    assert _kinds(said) == {SATISFACTION}, said
    # A first question judges no answer.
    for domain in cv.QUESTIONS.values():
        for question in domain.get(language, ()):
            assert _kinds(question.format(n=12)) == set(), question


def test_the_questions_are_in_the_domain_they_are_counted_in():
    for domain, by_language in cv.QUESTIONS.items():
        for templates in by_language.values():
            for t in templates:
                assert detect_domain(t.format(n=42)) == (None if domain == "general" else domain), t


def test_conversations_are_planned_the_same_for_a_seed_and_open_with_their_own_message():
    a, b = cv.plan(5, seed=1), cv.plan(5, seed=1)
    assert (a.alias, a.language, a.questions, a.messages) == (b.alias, b.language, b.questions, b.messages)
    firsts = Counter()
    for i in range(200):
        c = cv.plan(i, seed=0)
        assert c.messages[0]["role"] == "system" and len(c.messages) == 1
        assert len({q.text for q in c.questions}) == len(c.questions) >= 2  # never the same question twice
        firsts[c.questions[0].text] += 1
    assert max(firsts.values()) == 1  # a conversation is known by its first messages: no two alike
    assert {cv.plan(i, 0).language for i in range(50)} == {"en", "fr"}


def _always(draw: float) -> random.Random:
    rng = random.Random()
    rng.random = lambda: draw  # the user's next draw, fixed
    return rng


def test_a_chat_client_sends_the_whole_history_and_a_regenerate_sends_it_again():
    habits = cv.Habits(regenerate=0.25, complain=0.65, thank_and_ask=0.35, thank=0.35)
    c = cv.plan(3, seed=0, habits=habits)
    said, first = cv.first_turn(c)
    assert said == cv.QUESTION and [m["role"] for m in first] == ["system", "user"]
    c.rng = _always(0.1)  # below regenerate
    said, again = cv.next_turn(c, "an answer", right=False)
    assert said == cv.REGENERATE and again == first  # the same history, without the wrong answer
    c.rng = _always(0.5)  # a complaint
    said, complained = cv.next_turn(c, "another answer", right=False)
    assert said == cv.COMPLAINT and complained[:-2] == first
    assert complained[-2] == {"role": "assistant", "content": "another answer"}
    assert c.current.text in complained[-1]["content"]  # the question asked again after the complaint
    c.rng = _always(0.95)  # neither: the user leaves
    assert cv.next_turn(c, "a third answer", right=False) is None
    c.rng = _always(0.1)  # thanks and a new question
    said, thanked = cv.next_turn(c, "a right answer", right=True)
    assert said == cv.THANKS_AND_QUESTION and thanked[:len(complained)] == complained
    assert c.current.text in thanked[-1]["content"] and c.attempts == 1


def _turn(seq: int, alias: str, served: str, hard, said=cv.QUESTION, language="en") -> cv.Turn:
    return cv.Turn(seq, said, language, hard, Outcome(alias, "", served_by=served, quality=0.9,
                                                       headers={"x-aisia-request-id": f"r{seq}"}))


def test_frontier_shares_early_and_late_on_hard_and_easy_prompts():
    turns = [_turn(0, "auto", "coder", True), _turn(1, "auto", "swift", False), _turn(2, "auto", "coder", True),
             _turn(3, "auto", "frontier", True), _turn(4, "auto", "frontier", True), _turn(5, "auto", "swift", False),
             _turn(6, "auto/offline", "local", False), _turn(7, "auto", "swift", None, cv.THANKS_ONLY)]
    candidates = candidates_by_alias([{"alias": "auto", "candidates": [{"id": "frontier"}, {"id": "coder"}]},
                                      {"alias": "auto", "candidates": [{"id": "swift"}]}])
    prices = {"frontier": 7.5, "coder": 1.2, "swift": 0.26, "local": 0.0}
    rows = {r["alias"]: r for r in frontier_shares(turns, candidates, prices)}
    assert rows["auto"]["frontier"] == "frontier" and rows["auto/offline"]["frontier"] == "local"
    assert [t.sequence for t in rows["auto"]["hard early"]] == [0, 2] and rows["auto"]["hard late"] == []
    assert [t.sequence for t in rows["auto"]["easy early"]] == [1]  # the closing thanks counts in neither
    table = frontier_table(list(rows.values()))
    assert "0/2 0%" in table and "auto/offline" in table


def test_the_demo_says_what_taught_the_router():
    text = ('# TYPE aisia_conversation_signals_total counter\n'
            'aisia_conversation_signals_total{kind="correction",language="fr"} 3.0\n'
            'aisia_conversation_signals_total{kind="correction",language="en"} 2.0\n'
            'aisia_conversation_signals_total{kind="regenerate",language="none"} 1.0\n'
            'aisia_conversation_signals_total{kind="satisfaction",language="en"} 0.0\n')
    counts = parse_signal_metrics(text)
    assert counts == {("correction", "fr"): 3, ("correction", "en"): 2, ("regenerate", "none"): 1}
    turns = [_turn(0, "auto", "coder", True), _turn(1, "auto", "coder", True, cv.COMPLAINT, "fr")]
    said = learned_how(counts, turns, feedback=False)
    assert said.startswith("It learned without feedback") and "6 conversation signals" in said
    assert "correction 5 (fr 3, en 2), regenerate 1" in said and "1 complaints" in said
    said = learned_how(counts, turns, feedback=True)
    assert "2 grades posted to /aisia/feedback" in said and "without feedback" not in said


def test_the_users_languages_are_those_of_their_written_replies():
    turns = [_turn(0, "auto", "coder", True, cv.COMPLAINT, "fr"), _turn(1, "auto", "coder", True, cv.THANKS_ONLY, "en"),
             _turn(2, "auto", "coder", True, cv.THANKS_AND_QUESTION, "en"), _turn(3, "auto", "coder", True, cv.REGENERATE, "fr"),
             _turn(4, "auto", "coder", True, cv.QUESTION, "fr")]
    said = learned_how({}, turns, feedback=False)
    # (the regenerate and the question are no reply in words: 3 written, not 5)
    assert ("The users said: 1 complaints, 1 regenerates and 2 thank-yous; of these 3 written replies, "
            "2 in English and 1 in French") in said, said


def test_the_demo_names_the_failed_attempts_learned_as_the_requests_own():
    from prometheus_client import CollectorRegistry, generate_latest

    from aisia_plugin.demo.report import parse_uncounted_failures, uncounted_line
    from aisia_plugin.metrics import RouterMetrics

    reg = CollectorRegistry()
    m = RouterMetrics(reg)
    m.configure(aliases=["auto"], domains=["coding"], deployments=["coder", "flaky"], strategies=["contextual"])
    for result in ("success", "success", "provider_failure", "client_error"):
        m.outcome("auto", "coder", result)
    m.outcome("auto", "flaky", "success")
    uncounted = parse_uncounted_failures(generate_latest(reg).decode())
    assert uncounted == {"coder": 1}
    line = uncounted_line(uncounted)
    assert line.startswith("Failed attempts not counted against their deployment") and line.endswith(": coder 1.")
    assert uncounted_line({}) == "" and uncounted_line({"flaky": 0}) == ""
