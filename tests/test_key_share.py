"""One key's quality evidence moves a deployment's quality for everyone by at most 0.10
(aisia_plugin/key_share.py, docs/security.md#tenants): the rule's arithmetic, and the bound met
through the engine by a key giving 0 on every answer after another key's feedback."""

from __future__ import annotations

import random
from collections import deque

import pytest

from aisia_plugin.engine import Engine
from aisia_plugin.key_share import EvidenceShares, ShareRule
from aisia_plugin.policy import load_policy


def test_a_key_alone_counts_fully_and_a_key_among_others_up_to_its_share():
    sh = EvidenceShares(ShareRule(max_share=0.10, window=100))
    assert [sh.admit("d", "solo", 1.0, 10.0) for _ in range(3)] == [1.0, 1.0, 1.0]
    sh = EvidenceShares(ShareRule(max_share=0.10, window=100))
    for _ in range(20):
        assert sh.admit("d", "peer", 1.0, 10.0) == 1.0  # alone: full weight
    # The peer's 20 plus the prior's 10 allow 0.1 / 0.9 x 30 = 3.33 to the newcomer, then nothing.
    got = [sh.admit("d", "hostile", 1.0, 10.0) for _ in range(6)]
    assert got[:3] == [1.0, 1.0, 1.0] and got[3] == pytest.approx(1 / 3) and got[4:] == [0.0, 0.0]
    mine, others = sh.weights("d", "hostile")
    assert mine / (mine + others + 10.0) == pytest.approx(0.10)
    assert sh.admit("d", None, 1.0, 10.0) == 1.0  # no key (an in-process caller): as given
    assert sh.admit("other-deployment", "hostile", 1.0, 10.0) == 1.0  # per deployment


def test_the_window_forgets_the_oldest_pieces_and_a_refused_piece_pushes_none_out():
    sh = EvidenceShares(ShareRule(max_share=0.5, window=4))
    got = [sh.admit("d", k, 1.0, 0.0) for k in ("a", "a", "b", "b", "b", "b")]
    # b's pieces after a's two: 1, 1 (its share reaches 0.5 of a's 2 plus its own), then 0, 0,
    # which are not noted: they would have pushed a's two out of the window of 4 and left b
    # alone, counting fully again (found by a review).
    assert got == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert sh.weights("d", "a") == (2.0, 2.0) and sh.weights("d", "b") == (2.0, 2.0)
    # A piece that counts makes room by dropping the oldest (a's first): a's share read as the
    # window will be without it.
    assert sh.admit("d", "a", 1.0, 0.0) == 1.0
    assert sh.weights("d", "a") == (2.0, 2.0) and [k for k, _, _ in sh._recent["d"].pieces] == ["a", "b", "b", "a"]


def test_a_keys_share_is_bounded_in_a_domains_record_too():
    # The evidence of a math answer is recorded in the deployment's math record as well, which
    # decides every tenant's math prompts: a peer's 30 pieces about general answers left the
    # hostile key room for 3.7 of weight, all of it in math (0.275 below the prior there).
    eng = Engine(load_policy(), clock=lambda: 0.0, rng=random.Random(1))
    for _ in range(30):
        eng.record_quality("cheap", "auto", None, 0.95, "feedback", key="peer")
    for _ in range(10):
        eng.record_quality("cheap", "auto", "math", 0.95, "feedback", key="peer-math")
    before, before_math = eng.quality_estimate("cheap"), eng.quality_estimate("cheap", "math")
    for _ in range(40):
        eng.record_quality("cheap", "auto", "math", 0.0, "signal", key="hostile")
    moved, moved_math = before - eng.quality_estimate("cheap"), before_math - eng.quality_estimate("cheap", "math")
    assert 0.0 < moved <= ShareRule().max_share + 1e-9
    assert 0.0 < moved_math <= ShareRule().max_share + 1e-9, moved_math
    # The first key to speak of a domain among other keys does not own it: bounded there by the
    # prior alone (0.1/0.9 x 3), where it once held all of the domain's record (0.45 of another
    # tenant's similar prompt, found by a review).
    for _ in range(10):
        eng.record_quality("cheap", "auto", "coding", 0.0, "feedback", key="first")
    assert eng.shares.weights(("cheap", "coding"), "first")[0] == pytest.approx(0.1 / 0.9 * eng.quality.strength)
    assert eng.quality.strength == 3.0  # (the figure above)
    # Alone with the deployment, a key is its only user: counted fully in every record.
    assert eng.record_quality("solo-dep", "auto", "coding", 0.0, "feedback", key="solo").value == 0.0
    assert eng.shares.weights(("solo-dep", "coding"), "solo") == (1.0, 0.0)
    eng.shares.forget("cheap")
    assert list(eng.shares._recent) == ["solo-dep", ("solo-dep", "coding")]


# 600 and 3,000 rounds: past the window's 1,000 pieces, where the refused pieces pushed the peer's
# out and the hostile key, alone, counted fully (0.748 moved, found by a review).
@pytest.mark.parametrize("hostile_pieces", [5, 50, 500, 600, 3000])
def test_a_key_giving_0_on_every_answer_moves_the_estimate_by_at_most_the_bound(hostile_pieces):
    eng = Engine(load_policy(), clock=lambda: 0.0, rng=random.Random(1))
    dep = "frontier-1"
    for _ in range(30):
        eng.record_quality(dep, "auto", None, 0.95, "feedback", key="peer")
    before = eng.quality_estimate(dep, None)
    for _ in range(hostile_pieces):
        eng.record_quality(dep, "auto", None, 0.0, "feedback", key="hostile")
        eng.record_quality(dep, "auto", None, 0.0, "signal", key="hostile")
    moved = before - eng.quality_estimate(dep, None)
    assert 0.0 < moved <= ShareRule().max_share + 1e-9


def _full_scan(pieces, key):
    """(mine, others) as the rule read before the running sums: each admit scanned the window."""
    mine = others = 0.0
    for k, w in pieces:
        if k == key:
            mine += w
        else:
            others += w
    return mine, others


def _bounded(base, strength, mine, others, s=0.10):
    return min(base, max(0.0, s / (1.0 - s) * (strength + others) - mine))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_running_sums_agree_with_a_scan_of_the_window(seed):
    """Many thousand admits of several keys over a window of 50 (so pieces leave it, and the sums
    are taken afresh, again and again), in phases where one key speaks alone, one key presses
    against the bound (weights of 0) and all mix, against a full scan of the same window (the
    weights admitted, the last 50 per deployment): others > 0 is decided as the scan decides it
    every time, each weight admitted is the scan's rule's within 1e-12, and right after the sums
    are taken afresh (every 50 pieces dropped) each key's weight equals the scan's exactly.

    The scan follows the pieces admitted rather than its own: two windows apart drift by ulps, and
    a piece at the bound may be 0.0 in one and 2.2e-16 in the other, which decides others > 0."""
    rng = random.Random(seed)
    window = 50
    sh = EvidenceShares(ShareRule(max_share=0.10, window=window))
    admitted = {"d1": deque(maxlen=window), "d2": deque(maxlen=window)}
    count = {"d1": 0, "d2": 0}
    keys = ["a", "b", "c", "d", "e"]
    zeros = bounded = alone = 0
    for step in range(12_000):
        phase = (step // 400) % 3
        key = "a" if phase == 0 else ("a" if phase == 1 and rng.random() < 0.8 else rng.choice(keys))
        dep = "d1" if rng.random() < 0.75 else "d2"
        base = rng.choice([0.0, 0.3, 1.0, 1.0, 2.5, rng.uniform(0.0, 3.0)])
        strength = rng.choice([0.0, 2.0, 10.0])
        mine, others = _full_scan(admitted[dep], key)
        if dep in sh._recent:  # the decision itself: an others' weight rounded to 0.0 must not hide it
            counts = sh._recent[dep].counts
            assert (len(counts) > (key in counts)) == (others > 0.0)
        got_mine, got_others = sh.weights(dep, key)
        assert got_mine == pytest.approx(mine, abs=1e-12) and got_others == pytest.approx(others, abs=1e-12)
        # The rule reads the window as it will be when the piece enters: without its oldest once full.
        entering = list(admitted[dep])[1:] if len(admitted[dep]) == window else admitted[dep]
        mine, others = _full_scan(entering, key)
        want = _bounded(base, strength, mine, others) if others > 0.0 else base
        got = sh.admit(dep, key, base, strength)
        assert got == pytest.approx(want, abs=1e-12)
        if got > 0.0:  # a refused piece is not noted
            admitted[dep].append((key, got))
            count[dep] += 1
        zeros += want == 0.0 and base > 0.0
        bounded += others > 0.0 and want < base
        alone += others == 0.0
        if count[dep] > window and (count[dep] - window) % window == 0:  # the sums just taken afresh
            for k in keys:
                assert sh.weights(dep, k)[0] == _full_scan(admitted[dep], k)[0]
    assert zeros > 3000 and bounded > 5000 and alone > 200  # every case met, many times (about 9600, 9600, 400)


def test_a_key_alone_is_never_bounded_however_often_its_window_rolls_over():
    """Once another key's pieces have left the window (a day after they were noted: a key's own
    pieces never push them out), a lone key's evidence counts fully (its weight equal to the
    source's) however long it goes on: no rounding residue of the sums it and the other key left
    behind reads as another key's weight."""
    window = 50
    rule = ShareRule(max_share=0.10, window=window)
    sh = EvidenceShares(rule)
    for _ in range(10):
        sh.admit("d", "other", 0.3, 10.0, now=0.0)
    rng = random.Random(7)
    got = []
    for i in range(200 * window):
        base = rng.choice([0.1, 0.7, 1 / 3, 2.9, rng.uniform(0.0, 3.0)])
        now = 3600.0 * (i // 10)  # ten pieces an hour
        got.append((sh.admit("d", "solo", base, 10.0, now=now), base, now))
    assert any(w < base for w, base, _ in got[:10])  # bounded while the other key's pieces were there
    assert all(w == base for w, base, now in got if now > rule.horizon_s)
    assert sh.weights("d", "solo")[1] == 0.0 and sh.weights("d", "other") == (0.0, sh.weights("d", "solo")[0])


def test_a_piece_the_rule_cut_to_a_sliver_teaches_the_contextual_model_a_sliver():
    # The contextual model (the default aliases' strategy) learned every admitted piece as a whole
    # observation: one cut to 1e-4 of its weight moved a prompt's prediction as much as a full one
    # (found by a review). It now counts as the share of its source's weight the rule let through.
    from aisia_plugin.decision import Deployment

    deps = [Deployment("cheap", "cheap", "openai/cheap", "openai"),
            Deployment("frontier", "frontier", "openai/frontier", "openai")]
    prompt = [{"role": "user", "content": "Write a Python function that parses CSV files into records."}]
    moved = {}
    for case in ("full", "sliver"):
        eng = Engine(load_policy(), clock=lambda: 0.0, rng=random.Random(1))
        ctx = eng.decide("auto", prompt, deps).context
        if case == "sliver":  # a peer spoke; the hostile key used all of its room but 1e-4
            eng.record_quality("cheap", "auto", None, 0.95, "feedback", key="peer")
            room = ShareRule().max_share / (1 - ShareRule().max_share) * (eng.quality.strength + 1.0)
            eng.record_quality("cheap", "auto", None, 0.0, "feedback", key="hostile", weight=room - 1e-4)

        def residual():
            return eng.contextual.predict_residual(["cheap"], ctx.vector, eng.store.tick(), eng.quality_gamma,
                                                   ctx.prior_variance)[0][0]
        before = residual()
        eng.record_quality("cheap", "auto", None, 0.0, "signal", context=ctx, key="hostile")
        moved[case] = before - residual()
    assert moved["full"] > 0.01
    assert 0.0 < moved["sliver"] < moved["full"] * 1e-3, moved
