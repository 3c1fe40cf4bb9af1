"""One key's quality evidence moves a deployment's quality for everyone by at most 0.10
(aisia_plugin/key_share.py, docs/security.md#tenants): the rule's arithmetic, and the bound met
through the engine by a key giving 0 on every answer after another key's feedback."""

from __future__ import annotations

import random

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


def test_the_window_forgets_the_oldest_pieces():
    sh = EvidenceShares(ShareRule(max_share=0.5, window=4))
    for k in ("a", "a", "b", "b", "b", "b"):
        sh.admit("d", k, 1.0, 0.0)
    # b's pieces after a's two: 1, 1 (its share reaches 0.5 of a's 2 plus its own), then 0, 0;
    # the window of 4 has dropped a's two.
    assert sh.weights("d", "a") == (0.0, 2.0) and sh.weights("d", "b") == (2.0, 0.0)


@pytest.mark.parametrize("hostile_pieces", [5, 50, 500])
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
