"""The conversation benchmark (benchmarks/conversations.py, conversation_bench.py): the simulated
users behave at the configured rates, the truth never enters a request, a seed fixes the run, and
one small run through a real proxy judges every turn."""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import conversation_bench  # noqa: E402
from conversations import (  # noqa: E402
    GRADER_AGREEMENT, PHRASES, WORKLOADS, Conversation, QuestionBank, TruthRegistry, Users, answer_text,
    grader_reply, quoted_answer,
)

TWO_TIER = WORKLOADS["two_tier"]


def simulate(workload, n, seed=0, deployment="cheap", verdict=None):
    """Every conversation of a run served by one deployment, judged by the registry (or by
    ``verdict(turn)``): the turns in order, with their verdicts."""
    bank, registry, out = QuestionBank(), TruthRegistry(workload, seed, n), []
    for i in range(n):
        conv = Conversation(i, workload, bank, seed, n)
        while (turn := conv.next_turn()) is not None:
            key = registry.expect(turn)
            judged, right = registry.judge(deployment, turn.request_messages())
            assert judged == turn
            registry.take(key)
            if verdict is not None and turn.task is not None:
                right = verdict(turn)
            out.append((turn, right, conv))
            conv.answered(answer_text(deployment, judged, seed), right)
    return out


def after_wrong(turns):
    """The kind of turn each wrong answer (before the last attempt) drew: complaint, regenerate or
    anything else (silent: a new question or the end)."""
    kinds, by_conv = [], {}
    for turn, right, conv in turns:
        by_conv.setdefault(conv.index, []).append((turn, right))
    for rows in by_conv.values():
        for (turn, right), nxt in zip(rows, rows[1:] + [(None, None)]):
            if right is False and turn.attempt < TWO_TIER.users.max_attempts:
                kinds.append(nxt[0].kind if nxt[0] is not None else "end")
    return kinds


def test_wrong_answers_draw_complaints_and_regenerates_at_the_configured_rates():
    turns = simulate(TWO_TIER, 600, verdict=lambda turn: False)
    kinds = after_wrong(turns)
    assert len(kinds) > 500
    users = TWO_TIER.users
    complain, regen = kinds.count("complaint") / len(kinds), kinds.count("regenerate") / len(kinds)
    assert abs(complain - users.complain) < 0.06, complain
    assert abs(regen - users.regenerate) < 0.05, regen
    # a regenerate re-sends the prefix without the wrong answer: the same messages as the attempt before
    for (prev, _, _), (turn, _, _) in zip(turns, turns[1:]):
        if turn.kind == "regenerate":
            assert turn.messages == prev.messages and turn.task == prev.task and turn.attempt == prev.attempt + 1


def test_right_answers_draw_thanks_and_silent_users_never_react():
    turns = simulate(TWO_TIER, 400, verdict=lambda turn: True)
    kinds = [t.kind for t, _, _ in turns]
    assert kinds.count("thanks") + kinds.count("thanks_ask") > 0.25 * 400
    assert "complaint" not in kinds and "regenerate" not in kinds
    silent = replace(TWO_TIER, users=Users(silent=1.0))
    for verdict in (lambda turn: True, lambda turn: False):
        kinds = {t.kind for t, _, _ in simulate(silent, 200, verdict=verdict)}
        assert kinds <= {"ask", "next"}, kinds


def test_follow_ups_are_written_in_every_language():
    turns = simulate(TWO_TIER, 800, verdict=lambda turn: turn.attempt > 1)
    by_language: dict[str, set] = {}
    for turn, _, conv in turns:
        if turn.kind == "complaint":
            text = turn.messages[-1]["content"]
            assert text in PHRASES["complaint"][conv.language]
            by_language.setdefault(conv.language, set()).add(text)
    assert set(by_language) == {"en", "fr", "es", "de", "it", "pt"}


def test_the_truth_never_enters_a_request():
    turns = simulate(TWO_TIER, 300)
    assert any(r is False for _, r, _ in turns) and any(r is True for _, r, _ in turns)
    for turn, _, _ in turns:
        request = turn.request_messages()
        assert all(set(m) == {"role", "content"} for m in request)  # no metadata, no session id, no name
        text = json.dumps(request, ensure_ascii=False)
        assert turn.task is None or turn.task.qid not in text
        for label in ("ANSWER-", "correct=", "group=", "quality="):
            assert label not in text
    # The upstream's answers read the same whether right or wrong (the next request carries them):
    # the same words, the same lengths.
    texts = {verdict: [answer_text("cheap", t, 0) for t, r, _ in turns if r is verdict] for verdict in (True, False)}
    words = {verdict: {w for text in v for w in text.split()} for verdict, v in texts.items()}
    assert words[True] == words[False]
    lengths = {verdict: sum(map(len, v)) / len(v) for verdict, v in texts.items()}
    assert abs(lengths[True] - lengths[False]) < 0.1 * lengths[True]
    math_turn = next(t for t, _, _ in turns if t.task is not None and t.task.group == "math")
    # a regenerate is not a repeat
    assert len({answer_text("cheap", replace(math_turn, attempt=k), 0) for k in range(1, 6)}) == 5


def test_the_registry_judges_only_what_the_simulator_sent():
    registry = TruthRegistry(TWO_TIER, 0, 10)
    assert registry.judge("cheap", [{"role": "user", "content": "What is 2 + 2?"}]) == (None, None)
    assert registry.unknown_requests == 1


def test_a_seed_fixes_the_run():
    def run(seed):
        return [(t.conversation, t.kind, t.attempt, r, json.dumps(t.request_messages()))
                for t, r, _ in simulate(TWO_TIER, 120, seed=seed)]

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_accuracies_and_the_oracle():
    turns = simulate(TWO_TIER, 1000, deployment="frontier")
    scored = [r for t, r, _ in turns if r is not None]
    assert abs(sum(scored) / len(scored) - 0.92) < 0.02
    cheap_math = [r for t, r, _ in simulate(TWO_TIER, 600) if r is not None and t.task.group == "math"]
    assert abs(sum(cheap_math) / len(cheap_math) - 0.30) < 0.06
    assert TWO_TIER.oracle_choice("general", 0.0) == "cheap" and TWO_TIER.oracle_choice("math", 0.0) == "frontier"
    assert TWO_TIER.hard_groups() == ("math", "computing")
    degrading = WORKLOADS["degrading"]
    assert degrading.oracle_choice("general", 0.2) == "cheap" and degrading.oracle_choice("general", 0.6) == "frontier"


def test_mixing_quality_is_the_upper_hull_of_the_fixed_arms():
    fixed = [(1.0, 0.5), (10.0, 0.9), (5.0, 0.6)]  # the middle one is under the line: not on the hull
    assert conversation_bench.mixing_quality(fixed, 5.5) == pytest.approx(0.5 + 0.4 * 0.5)
    assert conversation_bench.mixing_quality(fixed, 0.5) == 0.5 and conversation_bench.mixing_quality(fixed, 20) == 0.9


def _judge_prompt(answer: str, tag: str = "0123456789abcdef") -> list[dict]:
    """The messages the plugin's judge sends to grade `answer` (aisia_plugin/judging.py)."""
    from aisia_plugin.judging import Rubric, ServedAnswer, judge_messages

    served = ServedAnswer("frontier", "auto", None, [{"role": "user", "content": "What is 2 + 2?"}], answer)
    return judge_messages(Rubric("en", "default", "You grade answers.", "Grade it."), served, tag, 6000)


def test_the_simulated_judge_reads_the_answer_the_plugins_judge_quotes_and_agrees_at_its_rate():
    registry, answers = TruthRegistry(TWO_TIER, 0, 10), {}
    for turn, right, _ in simulate(TWO_TIER, 300):
        text = answer_text("cheap", turn, 0)
        registry.answered(text, turn, right)
        if right is not None:
            answers[text] = right
    assert quoted_answer([{"role": "user", "content": "What is 2 + 2?"}]) is None  # no judge's prompt
    agree = scored = 0
    for text, right in answers.items():
        quoted = quoted_answer(_judge_prompt(text))
        assert quoted == text
        reply, _ = grader_reply(registry, quoted, 0)
        score = json.loads(reply)["score"]
        assert score in (2, 9)
        scored += 1
        agree += (score == 9) == right
    assert scored > 300 and abs(agree / scored - GRADER_AGREEMENT) < 0.04
    # A reply to a thanks: no task, graded as a fine answer; a text no upstream sent names no conversation.
    assert grader_reply(registry, "Glad I could help.", 0)[0] == '{"score": 8}'
    assert grader_reply(registry, "an answer nobody sent", 0) == ('{"score": 8}', None)


def test_the_judge_arm_names_the_frontier_as_judge_in_a_policy_the_proxy_loads(tmp_path):
    from aisia_plugin.policy.loader import load_policy

    judge, feedback = conversation_bench.arms_of(TWO_TIER, ["ours+judge", "ours+feedback"], 10)
    assert judge.proxy == feedback.proxy == "ours" and feedback.feedback and not judge.feedback
    (path := tmp_path / "team.yaml").write_text(conversation_bench.team_policy(TWO_TIER, judge.policy))
    settings = load_policy([path]).quality.judge
    assert settings.deployment == TWO_TIER.frontier.id and settings.sample_rate == conversation_bench.JUDGE_SAMPLE_RATE
    (path := tmp_path / "plain.yaml").write_text(conversation_bench.team_policy(TWO_TIER, feedback.policy))
    assert load_policy([path]).quality.judge.deployment is None


def test_the_judges_calls_of_the_last_half_count_in_the_arms_cost():
    rec = conversation_bench.TurnRecord
    records = [rec(c, 1, "ask", "math", 1, "cheap", True, 10, 10, 1.0) for c in range(4)]
    plain = conversation_bench.measure(records, TWO_TIER, 4)
    judged = conversation_bench.measure(records, TWO_TIER, 4, [(0, 0.5), (3, 0.25), (None, 0.125)])
    assert plain["cost_usd"] == 2.0 and "judge_calls" not in plain
    assert judged["cost_usd"] == 2.25 and judged["judge_calls"] == 1 and judged["judge_usd"] == 0.25
    assert judged["judge_calls_all"] == 3 and judged["judge_usd_all"] == 0.875


@pytest.mark.proxy
def test_the_judge_and_feedback_arms_through_a_real_proxy(tmp_path, monkeypatch):
    """Every answer sampled for the judge (rate 1 here): the proxy's judge calls are the simulated
    judge's, all graded, at the spend the benchmark counts; every task answer's verdict is posted."""
    monkeypatch.setattr(conversation_bench, "JUDGE_SAMPLE_RATE", 1.0)
    res = conversation_bench.run_workload(TWO_TIER, ["ours+judge", "ours+feedback"], 8, 0, 4, tmp_path)
    judged, fed = res["arms"]["ours+judge"], res["arms"]["ours+feedback"]
    assert judged["errors"] == fed["errors"] == 0 and judged["unknown_requests"] == fed["unknown_requests"] == 0
    counts = judged["judge"]
    assert judged["judge_calls_all"] >= judged["requests_all"] - 2  # (the last answers may be in flight at the end)
    assert counts["calls"] == {"graded": judged["judge_calls_all"]}
    assert counts["spend_usd"] == pytest.approx(judged["judge_usd_all"], rel=1e-6)
    assert fed["feedback"]["refused"] == 0 and fed["feedback"]["posted"] > 0
    assert "ours+judge`: " in "\n".join(conversation_bench.arm_notes(res))


@pytest.mark.proxy
def test_a_small_run_through_a_real_proxy(tmp_path):
    res = conversation_bench.run_workload(TWO_TIER, ["always:cheap"], 8, 0, 4, tmp_path)
    arm = res["arms"]["always:cheap"]
    assert arm["errors"] == 0 and arm["unknown_requests"] == 0
    assert arm["served"] == {"cheap": arm["requests"]} and arm["requests"] > 4
    expected = [t for t, _, _ in simulate(TWO_TIER, 8)]
    assert arm["requests_all"] == len(expected)  # the same conversations as the pure run: the proxy changed nothing


def test_results_md_quotes_the_committed_conversation_results():
    """RESULTS.md's conversation section is what run_all.py renders from results/conversations.json."""
    import run_all

    section = "\n".join(run_all.conversation_lines())
    assert section in run_all.RESULTS_MD.read_text(encoding="utf-8"), "stale: run benchmarks/run_all.py --render-only"


def test_the_picture_shows_each_full_workload_and_nothing_for_short_runs_alone(tmp_path):
    report = json.loads((Path(conversation_bench.bench.RESULTS) / "conversations.json").read_text())
    assert conversation_bench.plot(report, tmp_path / "all.png")
    assert (tmp_path / "all.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    short = {"workloads": [w for w in report["workloads"] if w["conversations"] < 1500]}
    assert short["workloads"] and not conversation_bench.plot(short, tmp_path / "short.png")
    assert not (tmp_path / "short.png").exists()


def _rerun(old: dict, arm: str, quality: float, commit: str) -> dict:
    """A run of `old`'s workload with `arm` alone, as run_workload and main leave it."""
    new = {k: v for k, v in old.items() if k not in ("arms", "conditions", "always_best")}
    new["arms"] = {arm: {**old["arms"][arm], "quality": quality, "commit": commit}}
    new["conditions"] = {**old["conditions"], "commit": commit, "arms": arm, "wall_s": 40.0, "date": "later"}
    new["conditions"].pop("added", None)
    return new


def test_a_merge_keeps_every_later_run_and_replaces_only_the_rerun_arm():
    committed = json.loads((REPO / "benchmarks" / "results" / "conversations.json").read_text())["workloads"]
    first = copy.deepcopy(committed[0])
    first["conditions"].pop("added", None)
    others = {k: v for k, v in first["arms"].items() if k != "ours"}
    once = conversation_bench.merged([first], [_rerun(first, "ours+judge", 0.5, "aaaaaaa")])
    twice = conversation_bench.merged(copy.deepcopy(once), [_rerun(first, "ours", 0.6, "bbbbbbb")])
    (w,) = twice
    assert w["arms"]["ours"]["quality"] == 0.6 and w["arms"]["ours+judge"]["quality"] == 0.5
    assert {k: v["quality"] for k, v in w["arms"].items() if k not in ("ours", "ours+judge")} == \
        {k: v["quality"] for k, v in others.items() if k != "ours+judge"}
    added = w["conditions"]["added"]
    assert added.startswith("ours+judge at commit aaaaaaa") and "; then ours at commit bbbbbbb" in added
    assert w["conditions"]["commit"] == first["conditions"]["commit"]  # the workload's own run stays named
    assert w["arms"]["ours"]["quality_share"] == pytest.approx(0.6 / w["arms"][w["always_best"]]["quality"])
    # A workload run again with its fixed arms replaces the old one whole; another is kept.
    whole = _rerun(first, "always:frontier", 0.9, "ccccccc")
    assert conversation_bench.merged([first, committed[1]], [whole]) == [committed[1], whole]
