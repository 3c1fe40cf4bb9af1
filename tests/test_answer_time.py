"""answer_time.py: a long answer's latency at the length caps (of the answer and of its prompt), and
what a key asking for long answers or sending huge prompts can do to another tenant's `auto/fast`
choice with it (docs/design.md#latency-and-answer-length)."""

from __future__ import annotations

import random

import pytest

from aisia_plugin.answer_time import (MIN_SPREAD_TOKENS, LengthCaps, TimeLine, TokenTimeFit, TokenTimes, at_length_cap,
                                     fitted, held_by_client, time_line)
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


def _slopes(fit: TokenTimeFit) -> tuple[float, float]:
    line = time_line(fit)
    return line.output_s, line.prompt_s


def test_the_line_finds_the_time_per_token_of_answers_of_different_lengths():
    rng = random.Random(7)
    # 0.4 s fixed, 20 ms a token, a little noise; most answers short, a few long.
    points = [(t, 0.4 + 0.02 * t + rng.gauss(0, 0.02)) for t in
              [rng.randint(20, 120) for _ in range(150)] + [rng.randint(1500, 4000) for _ in range(10)]]
    line = time_line(_fit(points))
    assert line.output_s == pytest.approx(0.02, rel=0.02)
    assert line.fixed_s == pytest.approx(0.4, abs=0.05)


def test_huge_prompts_with_short_answers_do_not_flatten_the_line():
    # 0.3 s + 1 ms per prompt token + 10 ms per output token. The usual answers: 40 to 120 tokens to
    # prompts of 50; a key's: eight prompts of 130,000 tokens with answers of 1 token (130 s each) to
    # each answer of 4,000 tokens to a short prompt.
    rng = random.Random(5)
    speed = lambda i, o: 0.3 + 0.001 * i + 0.010 * o  # noqa: E731
    usual = [(o, speed(50, o), 50) for o in (rng.randint(40, 120) for _ in range(100))]
    hostile = ([(1, speed(130_000, 1), 130_000)] * 8 + [(4000, speed(50, 4000), 50)]) * 5
    fit = _fit(usual + hostile)
    assert time_line(fit) == pytest.approx(TimeLine(0.3, 0.010, 0.001), rel=0.01)
    # Read on the answers' lengths alone (every prompt the same to the fit), the line is flat.
    alone = _fit([(o, y, 0) for o, y, _ in usual + hostile])
    assert _slopes(alone) == (0.0, 0.0)
    # Prompts that grow with their answers: the answers' lengths alone.
    together = _fit([(o, speed(2 * o, o), 2 * o) for o in range(20, 400, 7)])
    assert _slopes(together) == (pytest.approx(0.012, rel=0.01), 0.0)


def test_answers_of_one_length_to_prompts_of_many_read_the_prompts_line():
    # 0.2 s + 0.05 ms per prompt token; every answer 40 tokens (its time in the fixed part).
    rng = random.Random(11)
    fit = _fit([(40, 0.2 + 0.00005 * i, i) for i in (rng.randint(20, 3000) for _ in range(100))])
    assert time_line(fit) == pytest.approx(TimeLine(0.2, 0.0, 0.00005), rel=0.01)


def test_no_line_is_read_from_answers_of_one_length_nor_a_falling_one():
    flat = time_line(_fit([(100, 1.0 + 0.001 * k) for k in range(50)]))
    assert (flat.output_s, flat.prompt_s) == (0.0, 0.0) and 1.0 < flat.fixed_s < 1.049  # the (weighted) mean time
    spread = MIN_SPREAD_TOKENS * 0.9  # two lengths whose standard deviation is just under the spread
    assert _slopes(_fit([(100.0, 1.0), (100.0 + 2 * spread, 5.0)] * 20)) == (0.0, 0.0)
    assert _slopes(_fit([(40, 1.0, 100.0), (40, 5.0, 100.0 + 2 * spread)] * 20)) == (0.0, 0.0)  # the prompts'
    assert _slopes(_fit([(t, 10.0 - 0.001 * t) for t in range(10, 2000, 50)])) == (0.0, 0.0)  # longer, faster
    assert _slopes(_fit([(40, 10.0 - 0.001 * i, i) for i in range(10, 2000, 50)])) == (0.0, 0.0)
    assert time_line(TokenTimeFit()) is None


def test_a_long_answer_counts_as_one_of_the_caps_length_plus_its_distance_from_the_line_scaled():
    caps, line = LengthCaps(256, 4096), TimeLine(0.5, 0.01, 0.0)
    # 0.5 s + 10 ms a token: 4,000 tokens take 40.5 s, 256 take 3.06 s.
    assert at_length_cap(40.5, 4000, 50, line, caps) == pytest.approx(3.06)
    # 57 s off the line (a stream read slowly past the buffers, benchmarks/slow_reader.py): 57 x
    # 256 / 4000 of it counts.
    assert at_length_cap(40.5 + 57, 4000, 50, line, caps) == pytest.approx(3.06 + 57 * 256 / 4000)
    # Within the cap: as measured.
    assert at_length_cap(0.6, 10, 50, line, caps) == 0.6
    assert at_length_cap(3.06, 256, 50, line, caps) == 3.06
    # A fixed part too small or too large moves it no further than its time scaled, and its time.
    assert at_length_cap(40.5, 4000, 50, TimeLine(0.0, 0.01, 0.0), caps) == pytest.approx(40.5 * 256 / 4000)
    assert at_length_cap(40.5, 4000, 50, TimeLine(100.0, 0.01, 0.0), caps) == 40.5
    # As measured: no length, no answer fitted yet, the cap off.
    assert at_length_cap(40.5, None, 50, line, caps) == 40.5
    assert at_length_cap(40.5, 4000, 50, None, caps) == 40.5
    assert at_length_cap(40.5, 4000, 50, line, LengthCaps(0, 4096)) == 40.5


def test_an_answer_to_a_huge_prompt_counts_as_one_to_a_prompt_of_the_caps_length():
    caps, plane = LengthCaps(256, 4096), TimeLine(0.5, 0.01, 0.0001)
    # 0.5 s + 0.1 ms a prompt token + 10 ms an output token: 100 tokens to 60,000 take 7.5 s; to
    # 4,096 tokens, 1.9096 s.
    assert at_length_cap(7.5, 100, 60_000, plane, caps) == pytest.approx(1.9096)
    # Both past their caps: 4,000 tokens to 60,000 take 46.5 s; 256 to 4,096, 3.4696 s.
    assert at_length_cap(46.5, 4000, 60_000, plane, caps) == pytest.approx(3.4696)
    # The bounds: at least its time scaled by the smaller share of a length within its cap, at most its time.
    assert at_length_cap(7.5, 100, 60_000, TimeLine(0.0, 0.0, 1.0), caps) == pytest.approx(7.5 * 4096 / 60_000)
    assert at_length_cap(46.5, 4000, 60_000, TimeLine(0.0, 1.0, 1.0), caps) == 46.5
    # As measured: within the prompt cap, its length unknown, the prompt cap off.
    assert at_length_cap(1.5, 100, 4096, plane, caps) == 1.5
    assert at_length_cap(7.5, 100, None, plane, caps) == 7.5
    assert at_length_cap(7.5, 100, 60_000, plane, LengthCaps(256, 0)) == 7.5


def test_a_deployments_first_long_answer_is_read_against_the_line_it_makes():
    times, caps = TokenTimes(), LengthCaps(256, 4096)
    for k in range(30):
        assert times.at_length_cap("a", 0.5 + 0.01 * 40, 30, 40, caps) == pytest.approx(0.9)
    # The first long answer: its own point and the short ones make the line.
    assert times.at_length_cap("a", 0.5 + 0.01 * 4000, 30, 4000, caps) == pytest.approx(0.5 + 0.01 * 256)
    assert times.time_line("a") == pytest.approx(TimeLine(0.5, 0.01, 0.0))
    # A long answer read slowly (a stream whose client takes 300 s): the line steepens, and the
    # answer counts far below its time, however slowly it was read: at least 300 x 256 / 4000.
    slow = times.at_length_cap("a", 300.0, 30, 4000, caps)
    assert times.time_line("a").output_s > 0.01 and 300.0 * 256 / 4000 <= slow < 300.0 - 0.01 * (4000 - 256)
    times.forget("a")
    assert times.time_line("a") is None
    assert times.at_length_cap("b", None, 30, 10, caps) is None
    # An answer whose prompt's length is unknown does not fit (it is read against the fit).
    times.at_length_cap("c", 40.0, None, 4000, caps)
    assert times.time_line("c") is None
    # Both caps off: nothing fits, every time as measured.
    assert times.at_length_cap("d", 40.0, 30, 4000, LengthCaps(0, 0)) == 40.0
    assert times.time_line("d") is None


def test_a_long_stream_read_slowly_counts_its_delay_scaled_to_the_cap_against_a_known_line():
    # The line known from answers of every length read at once (a key may send those first); then
    # a 4,000-token stream whose client's reading adds 57 s (benchmarks/slow_reader.py, 30,000
    # tokens read at 40 KiB/s). Taken off the line as a whole it would count 60 s.
    times, caps = TokenTimes(), LengthCaps(256, 4096)
    rng = random.Random(4)
    for _ in range(100):
        n = rng.choice([rng.randint(20, 200), rng.randint(1000, 4000)])
        times.at_length_cap("a", 0.5 + 0.01 * n, 30, n, caps)
    slow = times.at_length_cap("a", 0.5 + 0.01 * 4000 + 57, 30, 4000, caps)
    print(f"a slow read adding 57 s to 4,000 tokens counts {slow:.2f} s (256 tokens take 3.06 s)")
    assert 3.06 < slow < 3.06 + 57 * 256 / 4000 + 0.1


def test_a_deployments_first_huge_prompt_is_read_against_the_prompts_line_it_makes():
    times, caps = TokenTimes(), LengthCaps(256, 4096)
    rng = random.Random(2)
    for _ in range(40):  # the usual prompts: 20 to 400 tokens, answers of 40; 0.3 s + 0.1 ms a prompt token
        i = rng.randint(20, 400)
        assert times.at_length_cap("a", 0.3 + 0.0001 * i, i, 40, caps) == pytest.approx(0.3 + 0.0001 * i)
    assert times.at_length_cap("a", 0.3 + 0.0001 * 60_000, 60_000, 40, caps) == pytest.approx(0.3 + 0.0001 * 4096)


POLICY = """
version: 1
defaults: false
aliases:
  t/fast:
    description: the fastest
    strategy: latency
    exploration: 0
bandit: {latency_length_cap_tokens: %d, latency_prompt_cap_tokens: %d}
"""
DEPLOYMENTS = [deployment("p1-quick"), deployment("p2-slow")]
# Fixed seconds, seconds per output token: the faster one's 256 tokens (1.58 s) still beat the other's
# usual answers (about 2.8 s). Both read a prompt's token in 0.1 ms.
SPEED = {"p1-quick": (0.3, 0.005), "p2-slow": (1.5, 0.010)}
PROMPT_S = 0.0001


def _answer(engine: Engine, dep: str, tokens: int, prompt: int = 20) -> None:
    fixed, per_token = SPEED[dep]
    engine.record("t/fast", Outcome(dep, True, latency_s=fixed + per_token * tokens + PROMPT_S * prompt,
                                    input_tokens=prompt, output_tokens=tokens))


def _share_to_quick(engine: Engine, n: int = 40) -> float:
    picks = [engine.decide("t/fast", [{"role": "user", "content": f"q {k}"}], DEPLOYMENTS).deployment_id
             for k in range(n)]
    return picks.count("p1-quick") / n


LONG_ANSWERS, HUGE_PROMPTS = (4000, 20), (100, 60_000)  # a key's (output tokens, prompt tokens)


@pytest.mark.parametrize("hostile, caps, capped", [
    (LONG_ANSWERS, LengthCaps(256, 4096), True), (LONG_ANSWERS, LengthCaps(0, 4096), False),
    (HUGE_PROMPTS, LengthCaps(256, 4096), True), (HUGE_PROMPTS, LengthCaps(256, 0), False)])
def test_a_keys_long_answers_or_huge_prompts_move_the_others_fast_choice_at_most_to_the_caps_lengths(
        tmp_path, hostile, caps, capped):
    (tmp_path / "policy.yaml").write_text(POLICY % caps)
    engine = Engine(load_policy([tmp_path / "policy.yaml"]), rng=random.Random(1))
    rng = random.Random(3)
    for _ in range(20):  # the other tenants' answers: 60 to 200 tokens to prompts of 20 to 400, on both
        for dep in SPEED:
            _answer(engine, dep, rng.randint(60, 200), rng.randint(20, 400))
    before = _share_to_quick(engine)
    usual = engine.store.stats()["p1-quick"]["avg_latency"]
    tokens, prompt = hostile
    for _ in range(30):  # a key's 30 answers on the faster deployment: 20.3 s or 6.8 s each
        _answer(engine, "p1-quick", tokens, prompt)
    after = _share_to_quick(engine)
    latency = engine.store.stats()["p1-quick"]["avg_latency"]
    print(f"{tokens} tokens to {prompt}, caps {tuple(caps)}: share to the faster {before:.2f} -> {after:.2f}; "
          f"its latency {usual:.2f} -> {latency:.2f} s, the other's {engine.store.stats()['p2-slow']['avg_latency']:.2f} s")
    assert before == 1.0
    fixed, per_token = SPEED["p1-quick"]
    if capped:  # at most its time for 256 tokens to a prompt of 4,096
        assert after == 1.0
        assert latency == pytest.approx(fixed + per_token * min(tokens, 256) + PROMPT_S * min(prompt, 4096), rel=0.01)
    else:  # the seed's latency as measured: its answers make the faster one the slower
        assert after == 0.0
        assert latency == pytest.approx(fixed + per_token * tokens + PROMPT_S * prompt, rel=0.01)


def test_a_stream_held_back_by_its_client_for_half_its_time_or_more_teaches_no_latency():
    assert not held_by_client(10.0, None)  # not timed (a whole answer, a stream the proxy could not time)
    assert not held_by_client(10.0, 0.0) and not held_by_client(10.0, 4.99)
    assert held_by_client(10.0, 5.0) and held_by_client(10.0, 9.0)
    assert not held_by_client(None, 3.0)


def test_a_held_stream_moves_neither_the_latency_nor_the_line_and_a_stream_held_less_counts_as_measured(tmp_path):
    (tmp_path / "policy.yaml").write_text(POLICY % LengthCaps(256, 4096))
    engine = Engine(load_policy([tmp_path / "policy.yaml"]), rng=random.Random(1))
    rng = random.Random(5)
    for _ in range(20):
        _answer(engine, "p1-quick", rng.randint(60, 200), rng.randint(20, 400))
    usual = engine.store.stats()["p1-quick"]["avg_latency"]
    line = engine.token_times.time_line("p1-quick")
    # A key's streams of 100 tokens (0.8 s from the provider), each held 60 s by its client.
    for _ in range(30):
        engine.record("t/fast", Outcome("p1-quick", True, latency_s=60.8, input_tokens=20, output_tokens=100,
                                        client_held_s=60.0))
    assert engine.store.stats()["p1-quick"]["avg_latency"] == usual
    assert engine.token_times.time_line("p1-quick") == line
    # Held 0.3 s of 1.1 s: what the client added is less than the rest; the stream counts as measured.
    engine.record("t/fast", Outcome("p1-quick", True, latency_s=1.1, input_tokens=20, output_tokens=100,
                                    client_held_s=0.3))
    assert engine.store.stats()["p1-quick"]["avg_latency"] > usual
