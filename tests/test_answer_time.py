"""answer_time.py: a long answer's latency at the length cap, and what a key asking for long answers
can do to another tenant's `auto/fast` choice with it (docs/design.md#latency-and-answer-length)."""

from __future__ import annotations

import random

import pytest

from aisia_plugin.answer_time import MIN_SPREAD_TOKENS, TokenTimeFit, TokenTimes, at_length_cap, fitted, per_token_s
from helpers import deployment
from aisia_plugin.engine import Engine
from aisia_plugin.outcome import Outcome
from aisia_plugin.policy import load_policy


def _fit(points) -> TokenTimeFit:
    """(output tokens, seconds) or (output tokens, seconds, prompt tokens; else 50) of each answer."""
    fit = TokenTimeFit()
    for tokens, seconds, *prompt in points:
        fit = fitted(fit, prompt[0] if prompt else 50.0, tokens, seconds)
    return fit


def test_the_line_finds_the_time_per_token_of_answers_of_different_lengths():
    rng = random.Random(7)
    # 0.4 s fixed, 20 ms a token, a little noise; most answers short, a few long.
    points = [(t, 0.4 + 0.02 * t + rng.gauss(0, 0.02)) for t in
              [rng.randint(20, 120) for _ in range(150)] + [rng.randint(1500, 4000) for _ in range(10)]]
    assert per_token_s(_fit(points)) == pytest.approx(0.02, rel=0.02)


def test_huge_prompts_with_short_answers_do_not_flatten_the_line():
    # 0.3 s + 1 ms per prompt token + 10 ms per output token. The usual answers: 40 to 120 tokens to
    # prompts of 50; a key's: eight prompts of 130,000 tokens with answers of 1 token (130 s each) to
    # each answer of 4,000 tokens to a short prompt.
    rng = random.Random(5)
    speed = lambda i, o: 0.3 + 0.001 * i + 0.010 * o  # noqa: E731
    usual = [(o, speed(50, o), 50) for o in (rng.randint(40, 120) for _ in range(100))]
    hostile = ([(1, speed(130_000, 1), 130_000)] * 8 + [(4000, speed(50, 4000), 50)]) * 5
    fit = _fit(usual + hostile)
    assert per_token_s(fit) == pytest.approx(0.010, rel=0.01)
    # Read on the answers' lengths alone (every prompt the same to the fit), the line is flat.
    alone = _fit([(o, y, 0) for o, y, _ in usual + hostile])
    assert per_token_s(alone) == 0.0
    # Prompts that grow with their answers: the answers' lengths alone.
    together = _fit([(o, speed(2 * o, o), 2 * o) for o in range(20, 400, 7)])
    assert per_token_s(together) == pytest.approx(0.012, rel=0.01)


def test_no_line_is_read_from_answers_of_one_length_nor_a_falling_one():
    assert per_token_s(_fit([(100, 1.0 + 0.001 * k) for k in range(50)])) == 0.0
    spread = MIN_SPREAD_TOKENS * 0.9  # two lengths whose standard deviation is just under the spread
    assert per_token_s(_fit([(100.0, 1.0), (100.0 + 2 * spread, 5.0)] * 20)) == 0.0
    assert per_token_s(_fit([(t, 10.0 - 0.001 * t) for t in range(10, 2000, 50)])) == 0.0  # longer, faster: no line
    assert per_token_s(TokenTimeFit()) == 0.0


def test_a_long_answer_counts_as_one_of_the_caps_length_between_its_time_scaled_and_its_time():
    # 0.5 s + 10 ms a token: 4,000 tokens take 40.5 s, 256 take 3.06 s.
    assert at_length_cap(40.5, 4000, 0.01, 256) == pytest.approx(3.06)
    # Within the cap: as measured.
    assert at_length_cap(0.6, 10, 0.01, 256) == 0.6
    assert at_length_cap(3.06, 256, 0.01, 256) == 3.06
    # A line too steep or too flat moves it no further than the bounds any line allows.
    assert at_length_cap(40.5, 4000, 1.0, 256) == pytest.approx(40.5 * 256 / 4000)
    assert at_length_cap(40.5, 4000, 1e-9, 256) == pytest.approx(40.5, rel=1e-6)
    # As measured: no length, no line, the cap off.
    assert at_length_cap(40.5, None, 0.01, 256) == 40.5
    assert at_length_cap(40.5, 4000, 0.0, 256) == 40.5
    assert at_length_cap(40.5, 4000, 0.01, 0) == 40.5


def test_a_deployments_first_long_answer_is_read_against_the_line_it_makes():
    times = TokenTimes()
    for k in range(30):
        assert times.at_length_cap("a", 0.5 + 0.01 * 40, 30, 40, 256) == pytest.approx(0.9)
    # The first long answer: its own point and the short ones make the line.
    assert times.at_length_cap("a", 0.5 + 0.01 * 4000, 30, 4000, 256) == pytest.approx(0.5 + 0.01 * 256)
    assert times.per_token_s("a") == pytest.approx(0.01)
    # A long answer read slowly (a stream whose client takes 300 s): the line steepens, and the
    # answer counts far below its time, however slowly it was read: at least 300 x 256 / 4000.
    slow = times.at_length_cap("a", 300.0, 30, 4000, 256)
    assert times.per_token_s("a") > 0.01 and 300.0 * 256 / 4000 <= slow < 300.0 - 0.01 * (4000 - 256)
    times.forget("a")
    assert times.per_token_s("a") == 0.0
    assert times.at_length_cap("b", None, 30, 10, 256) is None
    # An answer whose prompt's length is unknown does not fit (it is read against the fit).
    times.at_length_cap("c", 40.0, None, 4000, 256)
    assert times.per_token_s("c") == 0.0


POLICY = """
version: 1
defaults: false
aliases:
  t/fast:
    description: the fastest
    strategy: latency
    exploration: 0
bandit: {latency_length_cap_tokens: %d}
"""
DEPLOYMENTS = [deployment("p1-quick"), deployment("p2-slow")]
# Fixed seconds, seconds per output token: the faster one's 256 tokens (1.58 s) still beat the other's
# usual answers (about 2.8 s).
SPEED = {"p1-quick": (0.3, 0.005), "p2-slow": (1.5, 0.010)}


def _answer(engine: Engine, dep: str, tokens: int) -> None:
    fixed, per_token = SPEED[dep]
    engine.record("t/fast", Outcome(dep, True, latency_s=fixed + per_token * tokens, input_tokens=20,
                                    output_tokens=tokens))


def _share_to_quick(engine: Engine, n: int = 40) -> float:
    picks = [engine.decide("t/fast", [{"role": "user", "content": f"q {k}"}], DEPLOYMENTS).deployment_id
             for k in range(n)]
    return picks.count("p1-quick") / n


@pytest.mark.parametrize("cap", [256, 0])
def test_a_key_asking_for_long_answers_moves_the_others_fast_choice_at_most_to_the_caps_length(tmp_path, cap):
    (tmp_path / "policy.yaml").write_text(POLICY % cap)
    engine = Engine(load_policy([tmp_path / "policy.yaml"]), rng=random.Random(1))
    rng = random.Random(3)
    for _ in range(20):  # the other tenants' answers: 60 to 200 tokens on both
        for dep in SPEED:
            _answer(engine, dep, rng.randint(60, 200))
    before = _share_to_quick(engine)
    usual = engine.store.stats()["p1-quick"]["avg_latency"]
    for _ in range(30):  # a key's answers of 4,000 tokens on the faster deployment
        _answer(engine, "p1-quick", 4000)
    after = _share_to_quick(engine)
    latency = engine.store.stats()["p1-quick"]["avg_latency"]
    print(f"cap {cap}: share to the faster {before:.2f} -> {after:.2f}; its latency {usual:.2f} -> {latency:.2f} s, "
          f"the other's {engine.store.stats()['p2-slow']['avg_latency']:.2f} s")
    assert before == 1.0
    if cap:
        assert after == 1.0
        assert latency == pytest.approx(0.3 + 0.005 * 256, rel=0.01)  # at most its time for 256 tokens
    else:  # the seed's latency as measured: its 20.3 s answers make the faster one the slower
        assert after == 0.0
