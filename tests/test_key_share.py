"""One key's quality evidence moves a deployment's quality for everyone by at most 0.10
(aisia_plugin/key_share.py, docs/security.md#tenants): the rule's arithmetic, and the bound met
through the engine by a key giving 0 on every answer after another key's feedback."""

from __future__ import annotations

import random
from collections import deque

import pytest

from aisia_plugin.engine import Engine
from aisia_plugin.key_share import KeyPulls, PullRule
from aisia_plugin.policy import load_policy


class Record:
    """A deployment's estimate as quality.py keeps it: the prior's `strength` pseudo-observations
    at `prior`, then each piece at the weight it counted with, forgotten by `gamma` per tick."""

    def __init__(self, strength: float, prior: float, gamma: float = 1.0):
        self.strength, self.prior, self.gamma = strength, prior, gamma
        self.weight = self.total = 0.0
        self.tick = 0.0

    def to(self, tick: float) -> None:
        f = self.gamma ** (tick - self.tick)
        self.weight, self.total, self.tick = self.weight * f, self.total * f, tick

    def add(self, weight: float, value: float) -> None:
        self.weight += weight
        self.total += weight * value

    def estimate(self) -> float:
        return (self.strength * self.prior + self.total) / (self.strength + self.weight)


def admit(sh: KeyPulls, rec: Record, key, value: float, base: float = 1.0, now: float = 0.0,
          deployment: str = "d") -> float:
    """A piece admitted by the rule at the record's tick and recorded at the weight it counted with."""
    w = sh.admit(deployment, key, base, value, rec.strength, rec.prior, now=now, tick=rec.tick, gamma=rec.gamma)
    rec.add(w, value)
    return w


def test_a_key_alone_counts_fully_and_a_key_among_others_up_to_its_pull():
    sh, rec = KeyPulls(PullRule(max_pull=0.10, window=100)), Record(10.0, 0.5)
    assert [admit(sh, rec, "solo", 0.0) for _ in range(3)] == [1.0, 1.0, 1.0]
    sh, rec = KeyPulls(PullRule(max_pull=0.10, window=100)), Record(10.0, 0.5)
    for _ in range(20):
        assert admit(sh, rec, "peer", 0.9) == 1.0  # alone: full weight
    # Without the newcomer the estimate is (10 x 0.5 + 20 x 0.9) / 30 = 0.767; n pieces of 0 pull
    # it by 0.767 n / (30 + n), which reaches 0.10 at n = 4.5: four whole pieces, half a piece, then
    # nothing.
    without = rec.estimate()
    got = [admit(sh, rec, "hostile", 0.0) for _ in range(7)]
    assert got[:4] == [1.0] * 4 and got[4] == pytest.approx(0.5) and got[5:] == [0.0, 0.0]
    assert without - rec.estimate() == pytest.approx(0.10)
    # A key that says what the others say (within 0.10 of the estimate without it) counts fully,
    # however much it says: 50 pieces at 0.8 beside the peer's 0.9s and the hostile key's 0s.
    assert [admit(sh, rec, "friend", 0.8) for _ in range(50)] == [1.0] * 50
    assert sh.admit("d", None, 1.0, 0.0, 10.0, 0.5) == 1.0  # no key (an in-process caller): as given
    assert sh.admit("other-deployment", "hostile", 1.0, 0.0, 10.0, 0.5) == 1.0  # per deployment


def test_keys_that_agree_learn_together_however_few_they_are():
    # Two to five keys whose users find the deployment right 90 % of the time (each piece 1 or 0),
    # about a deployment whose prior is 0.5 at the policy's strength 3: the rule that bounded each
    # key's share of the weight at 10 % let 1.4 (two keys), 2.0 (three) and 3.7 (five) of their
    # 400 pieces count, and the estimate stayed near the prior; bounding each key's pull lets
    # nearly all of them count.
    for n in (2, 3, 5):
        rng = random.Random(1)
        sh, rec = KeyPulls(), Record(3.0, 0.5)
        got = [admit(sh, rec, f"k{i % n}", float(rng.random() < 0.9)) for i in range(400)]
        assert sum(got) > 390 and rec.estimate() > 0.85, (n, sum(got), rec.estimate())


def test_a_key_alone_then_joined_is_held_where_it_stands_until_the_others_agree():
    # Alone, a key's 0s took the estimate from the prior 0.5 to 0.065 (a pull of 0.43 once another
    # key is there to be weighed against). A second key's 0 agrees; beside it, the first key's pull
    # is past the bound: a 0 (further) counts nothing, a 1 (back toward the others) fully. Once the
    # second key's 0s make up the others, the first key's pull is small and its 0s count again.
    sh, rec = KeyPulls(PullRule(max_pull=0.10, window=100)), Record(3.0, 0.5)
    assert [admit(sh, rec, "first", 0.0) for _ in range(20)] == [1.0] * 20
    assert admit(sh, rec, "second", 0.0) == 1.0
    assert admit(sh, rec, "first", 0.0) == 0.0
    assert admit(sh, rec, "first", 1.0) == 1.0
    assert [admit(sh, rec, "second", 0.0) for _ in range(20)] == [1.0] * 20
    assert admit(sh, rec, "first", 0.0) == 1.0


def test_the_window_forgets_as_the_estimate_does():
    # A peer's 0.9s, then 3,000 ticks of other traffic (half of the evidence forgotten at the
    # policy's half-life of 3,000 ticks, the 0.9s with it): the hostile key's 0s are held to a pull
    # of 0.10 on the estimate as it stands (2.45 pieces). A window that counted the peer's pieces
    # whole let 4.32 pieces count, which moved the real estimate by 0.161.
    gamma = 0.5 ** (1 / 3000)
    sh, rec = KeyPulls(PullRule(max_pull=0.10, window=100)), Record(3.0, 0.5, gamma=gamma)
    for _ in range(30):
        admit(sh, rec, "peer", 0.9)
    rec.to(3000.0)
    without = rec.estimate()
    got = [admit(sh, rec, "hostile", 0.0) for _ in range(40)]
    assert without - rec.estimate() == pytest.approx(0.10) and got[-1] == 0.0 and sum(got) == pytest.approx(2.4545, abs=1e-4)
    # The weights are kept in the units of a reference tick, brought to the current one when
    # reading them takes a factor below 1e-100 (some 330 half-lives later): the same reading.
    rec.to(3000.0 * 400)
    admit(sh, rec, "peer", 0.9)
    window = sh._recent["d"]
    assert window.ref == 3000.0 * 400 and window.standing("peer", window.factor(rec.tick, gamma)).mine == pytest.approx(1.0)


def test_keys_spread_over_processes_pull_the_shared_record_about_as_far_as_in_one():
    # Two workers, each with its own windows, record into one shared estimate; the peers' and the
    # hostile key's pieces alternate between them. Each worker holds the hostile key to 0.10
    # against what it saw; the shared estimate moves by about 0.10 in all (each worker's prior
    # counts once more: 0.1 x 3 / 23 = 0.013 of slack at most), not 0.10 per worker.
    rec = Record(3.0, 0.5)
    workers = [KeyPulls(PullRule(max_pull=0.10, window=100)) for _ in range(2)]
    for i in range(40):
        admit(workers[i % 2], rec, f"peer{i % 4}", 0.9)
    without = rec.estimate()
    for i in range(200):
        admit(workers[i % 2], rec, "hostile", 0.0)
    assert 0.10 < without - rec.estimate() <= 0.10 + 0.1 * 3.0 / 23.0


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
    assert 0.0 < moved <= PullRule().max_pull + 1e-9
    assert 0.0 < moved_math <= PullRule().max_pull + 1e-9, moved_math
    # The first key to speak of a domain among other keys does not own it: bounded there by the
    # prior alone (its 0s pull the prior p by 0.10 at a weight of 0.1 x 3 / (p - 0.1)), where it
    # once held all of the domain's record (0.45 of another tenant's similar prompt, found by a
    # review).
    for _ in range(10):
        eng.record_quality("cheap", "auto", "coding", 0.0, "feedback", key="first")
    p = eng.quality.prior("cheap", "coding")
    assert eng.key_pulls.weights(("cheap", "coding"), "first")[0] == pytest.approx(0.1 * eng.quality.strength / (p - 0.1))
    assert eng.quality.strength == 3.0  # (the figure above)
    # Alone with the deployment, a key is its only user: counted fully in every record.
    assert eng.record_quality("solo-dep", "auto", "coding", 0.0, "feedback", key="solo").value == 0.0
    assert eng.key_pulls.weights(("solo-dep", "coding"), "solo") == (1.0, 0.0)
    eng.key_pulls.forget("cheap")
    assert list(eng.key_pulls._recent) == ["solo-dep", ("solo-dep", "coding")]


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
    assert 0.0 < moved <= PullRule().max_pull + 1e-9


def _full_scan(pieces, key):
    """(mine, my weighted values, others, their weighted values) as a scan of the window reads them."""
    mine = mine_v = others = others_v = 0.0
    for k, w, v in pieces:
        if k == key:
            mine, mine_v = mine + w, mine_v + w * v
        else:
            others, others_v = others + w, others_v + w * v
    return mine, mine_v, others, others_v


def _bounded(base, value, strength, prior, scan, s=0.10):
    """The rule from its definition, by bisection: the largest weight in [0, base] with which the
    estimate made of the prior and the window's pieces (a weighted mean) lies within max(s, where
    it lay) of the estimate without the key's pieces."""
    mine, mine_v, others, others_v = scan
    without = (strength * prior + others_v) / (strength + others)

    def pull(w):
        return abs((strength * prior + others_v + mine_v + w * value) / (strength + others + mine + w) - without)

    allowed = max(s, pull(0.0))
    if pull(base) <= allowed * (1 + 1e-12):
        return base
    lo, hi = 0.0, base  # pull(lo) within, pull(hi) past: the set within is [0, w*]
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if pull(mid) <= allowed else (lo, mid)
    return lo


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_running_sums_agree_with_a_scan_of_the_window(seed):
    """Many thousand admits of several keys over a window of 50 (so pieces leave it, and the sums
    are taken afresh, again and again), in phases where one key speaks alone, one key presses
    against the bound (weights of 0) and all mix, against a full scan of the same window (the
    weights admitted, the last 50 per deployment) and the rule from its definition (``_bounded``):
    whether another key spoke is decided as the scan decides it every time, each weight admitted
    is the definition's within 1e-9, and right after the sums are taken afresh (every 50 pieces
    dropped) each key's weight equals the scan's exactly.

    The scan follows the pieces admitted rather than its own: two windows apart drift by ulps, and
    a piece at the bound may be 0.0 in one and 2.2e-16 in the other, which decides others > 0."""
    rng = random.Random(seed)
    window = 50
    sh = KeyPulls(PullRule(max_pull=0.10, window=window))
    admitted = {"d1": deque(maxlen=window), "d2": deque(maxlen=window)}
    count = {"d1": 0, "d2": 0}
    keys = ["a", "b", "c", "d", "e"]
    zeros = bounded = alone = 0
    for step in range(12_000):
        phase = (step // 400) % 3
        key = "a" if phase == 0 else ("a" if phase == 1 and rng.random() < 0.8 else rng.choice(keys))
        dep = "d1" if rng.random() < 0.75 else "d2"
        base = rng.choice([0.0, 0.3, 1.0, 1.0, 2.5, rng.uniform(0.0, 3.0)])
        # Key "a" mostly says the opposite of the others: it presses against the bound.
        value = rng.choice([0.0, 0.0, 0.1, rng.random()]) if key == "a" else rng.choice([1.0, 0.9, rng.random()])
        strength, prior = rng.choice([0.0, 2.0, 10.0]), rng.choice([0.2, 0.5, 0.9])
        mine, _, others, _ = _full_scan(admitted[dep], key)
        if dep in sh._recent:  # the decision itself: an others' weight rounded to 0.0 must not hide it
            counts = sh._recent[dep].counts
            assert (len(counts) > (key in counts)) == (others > 0.0)
        got_mine, got_others = sh.weights(dep, key)
        assert got_mine == pytest.approx(mine, abs=1e-12) and got_others == pytest.approx(others, abs=1e-12)
        # The rule reads the window as it will be when the piece enters: without its oldest once full.
        entering = list(admitted[dep])[1:] if len(admitted[dep]) == window else admitted[dep]
        scan = _full_scan(entering, key)
        want = _bounded(base, value, strength, prior, scan) if scan[2] > 0.0 else base
        got = sh.admit(dep, key, base, value, strength, prior)
        assert got == pytest.approx(want, abs=1e-9), (step, got, want)
        if got > 0.0:  # a refused piece is not noted
            admitted[dep].append((key, got, value))
            count[dep] += 1
        zeros += want < 1e-9 and base > 0.0
        bounded += scan[2] > 0.0 and want < base - 1e-9
        alone += scan[2] == 0.0
        if count[dep] > window and (count[dep] - window) % window == 0:  # the sums just taken afresh
            for k in keys:
                assert sh.weights(dep, k)[0] == _full_scan(admitted[dep], k)[0]
    assert zeros > 1000 and bounded > 2000 and alone > 200  # every case met, many times (about 4700, 4800, 500)


def test_a_key_alone_is_never_bounded_however_often_its_window_rolls_over():
    """Once another key's pieces have left the window (a day after they were noted: a key's own
    pieces never push them out), a lone key's evidence counts fully (its weight equal to the
    source's) however long it goes on: no rounding residue of the sums it and the other key left
    behind reads as another key's weight."""
    window = 50
    rule = PullRule(max_pull=0.10, window=window)
    sh, rec = KeyPulls(rule), Record(10.0, 0.5)
    for _ in range(10):
        admit(sh, rec, "other", 1.0, base=0.3, now=0.0)
    rng = random.Random(7)
    got = []
    for i in range(200 * window):
        base = rng.choice([0.1, 0.7, 1 / 3, 2.9, rng.uniform(0.0, 3.0)])
        now = 3600.0 * (i // 10)  # ten pieces an hour
        got.append((admit(sh, rec, "solo", 0.0, base=base, now=now), base, now))
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
            # The hostile key's 0s pull the estimate of the prior and the peer's piece, mu, by 0.10
            # at the weight 0.1 x (strength + 1) / (mu - 0.1).
            strength, prior = eng.quality.strength, eng.quality.prior("cheap", None)
            mu = (strength * prior + 0.95) / (strength + 1.0)
            room = PullRule().max_pull * (strength + 1.0) / (mu - PullRule().max_pull)
            eng.record_quality("cheap", "auto", None, 0.0, "feedback", key="hostile", weight=room - 1e-4)

        def residual():
            return eng.contextual.predict_residual(["cheap"], ctx.vector, eng.store.tick(), eng.quality_gamma,
                                                   ctx.prior_variance)[0][0]
        before = residual()
        eng.record_quality("cheap", "auto", None, 0.0, "signal", context=ctx, key="hostile")
        moved[case] = before - residual()
    assert moved["full"] > 0.01
    assert 0.0 < moved["sliver"] < moved["full"] * 1e-3, moved


def test_a_key_complaining_about_its_own_prompts_moves_the_estimate_and_the_prompt_part_within_the_bound():
    """The figures of docs/security.md's bound on the prompt weights (pytest -s prints them): 200
    pieces of feedback at 0.9 from 20 keys about the cheap deployment's coding answers, with no
    prompt (or, second, with prompts of their own), then 40 complaints from one key about its own
    "parse these files" prompts. The coding estimate moves within the bound, and so does the
    prompt weights' part of another tenant's similar prompt (0.29 and 0.26 before the prompt
    weights were bounded per key, 2026-12-07; 0.054 and 0.042 after), while the key alone with the
    deployment moves it freely (a single tenant's evidence counts fully)."""
    from aisia_plugin.decision import Deployment

    deps = [Deployment("cheap", "cheap", "openai/cheap", "openai"),
            Deployment("frontier", "frontier", "openai/frontier", "openai")]

    def ask(text):
        return [{"role": "user", "content": text}]

    hostile = [f"Write Python code that can parse these files: {w}.csv" for w in ("alpha", "beta", "gamma", "delta")]
    others = ["Write a Java class for a binary search tree", "Write SQL to join two tables by id",
              "Fix this Rust borrow checker error in my loop", "Write a bash script that renames photos"]
    parts = {}
    for others_prompts in (False, True, None):  # None: no other key at all
        eng = Engine(load_policy(), clock=lambda: 0.0, rng=random.Random(1))
        victim = eng.decide("auto", ask("Write Python code to parse Markdown tables"), deps).context
        domain = eng.decide("auto", ask(hostile[0]), deps).domain
        for i in range(200 if others_prompts is not None else 0):
            ctx = eng.decide("auto", ask(others[i % 4]), deps).context if others_prompts else None
            eng.record_quality("cheap", "auto", domain, 0.9, "feedback", key=f"peer{i % 20}", context=ctx)

        def prompt_part():
            return eng.contextual.predict_residual(["cheap"], victim.vector, eng.store.tick(), eng.quality_gamma,
                                                   victim.prior_variance)[0][0]
        before, estimate = prompt_part(), eng.quality_estimate("cheap", domain)
        for i in range(40):
            ctx = eng.decide("auto", ask(hostile[i % 4]), deps).context
            eng.record_quality("cheap", "auto", None, 0.0, "signal", context=ctx, key="hostile")
        moved = estimate - eng.quality_estimate("cheap", domain)
        parts[others_prompts] = before - prompt_part()
        print(f"others' prompts {others_prompts}: the {domain} estimate moved {moved:.3f}, "
              f"the victim's prompt part {parts[others_prompts]:.3f}")
        if others_prompts is not None:
            assert 0.0 < moved <= PullRule().max_pull + 1e-9
            # The victim's prompt has no repeated word: its vector's norm is 1.
            assert 0.0 < parts[others_prompts] <= PullRule().max_pull + 1e-9
    assert parts[None] > 2 * PullRule().max_pull  # alone, the key's evidence counted fully (0.29)


def _pull_norm(models, dep: str, pull, tick: float, gamma: float) -> float:
    """The key's pull on the prompt weights at `tick`, from the model's natural parameters (each
    slot's h and precision, forgotten to `tick`): per slot the key holds, the mean less the mean
    without its h and precision."""
    import numpy as np

    k = models.ids[dep]
    slots, h_key, q_key = pull.at(tick, gamma)
    f = models.scale[k] * gamma ** (tick - models.tick[k])
    prec = models.p0[k] + models.dp[slots, k].astype(float) * f
    h = models.h[slots, k].astype(float) * f
    return float(np.linalg.norm(h / prec - (h - h_key) / np.maximum(prec - q_key, models.p0[k])))


@pytest.mark.parametrize("gamma", [1.0, 0.999])
def test_a_keys_pull_on_the_prompt_weights_is_held_to_the_bound_by_the_largest_weight_that_keeps_it(gamma):
    # The model alone (contextual.py), its tick moving on: a peer's praise of varied prompts, a
    # hostile key's mostly low grades on prompts sharing some of their words. After each piece the hostile key's
    # pull, read from the model's slot means, is within 0.10 (or, once past it alone, does not
    # grow); a piece cut short brings it to the bound exactly (the largest weight that keeps it).
    from types import SimpleNamespace

    from aisia_plugin.contextual import ContextualModels, LearnContext, request_vector
    from aisia_plugin.key_share import PromptBound, PromptPull

    rng = random.Random(7)
    words = ("parse csv files rows columns python json tables markdown split header quote escape "
             "values numbers dates write read stream encode").split()
    models = ContextualModels()

    def context(n_words: int):
        text = " ".join(rng.choice(words) for _ in range(n_words))
        feats = SimpleNamespace(text=text, task_type="coding", length_bucket="short", modality="text")
        return LearnContext(request_vector(feats, "coding", "coding"), 0.6, 0.1, 0.25)

    peer, hostile = PromptPull(), PromptPull()
    cut = refused = 0
    alone_past = 0.0
    tick = 0.0
    for i in range(600):
        tick += 1.0
        if i % 3 == 0:
            models.learn("cheap", context(rng.randint(3, 12)), 1.0, tick, gamma, bound=PromptBound(peer, 0.1))
            continue
        # Among keys, then alone (the other keys' pieces a day old) long enough to pass the
        # bound, then among keys again: held where it stands.
        limit = None if 300 <= i < 420 else 0.1
        weight = rng.choice([1.0, 0.5, 0.2])
        was = _pull_norm(models, "cheap", hostile, tick, gamma) if len(hostile.slots) else 0.0
        value = rng.choice([0.0, 0.0, 0.2, 1.0])  # mostly the opposite of the peer, not always
        got = models.learn("cheap", context(rng.randint(3, 12)), value, tick, gamma, weight=weight,
                           bound=PromptBound(hostile, limit))
        now = _pull_norm(models, "cheap", hostile, tick, gamma)
        assert 0.0 <= got <= weight * (1 + 1e-12)
        if limit is None:
            assert got == weight
            alone_past = max(alone_past, now)
            continue
        assert now <= max(0.1, was) * (1 + 1e-6) + 1e-9, (i, was, now)
        if 0.0 < got < weight * (1 - 1e-9):
            cut += 1
            assert now == pytest.approx(max(0.1, was), rel=1e-4), (i, was, now)
        refused += got == 0.0
    assert alone_past > 0.1  # alone it went past the bound, then was held where it stood
    assert cut > 10 and refused > 10, (cut, refused)
    assert _pull_norm(models, "cheap", hostile, tick, gamma) <= max(0.1, alone_past) * (1 + 1e-6)


def test_keys_that_agree_about_prompts_move_the_prompt_part_further_together_than_one_may():
    # Three keys complaining about the cheap deployment's math answers, 40 times each, after other
    # keys' praise without prompts: each key is held to 0.10 of pull, and together they move a
    # similar prompt's part beyond it (0.135 on 2026-12-07; one key with the same prompts: 0.047).
    from aisia_plugin.decision import Deployment

    deps = [Deployment("cheap", "cheap", "openai/cheap", "openai"),
            Deployment("frontier", "frontier", "openai/frontier", "openai")]
    rng = random.Random(3)
    words = "integral derivative matrix prime theorem solve equation limit series probability vector proof".split()

    def moved(keys):
        eng = Engine(load_policy(), clock=lambda: 0.0, rng=random.Random(1))
        victim = eng.decide("auto", [{"role": "user", "content": "Compute the integral of this series"}], deps).context
        for i in range(200):
            eng.record_quality("cheap", "auto", None, 0.9, "feedback", key=f"peer{i % 20}")

        def part():
            return eng.contextual.predict_residual(["cheap"], victim.vector, eng.store.tick(), eng.quality_gamma,
                                                   victim.prior_variance)[0][0]
        before = part()
        for _ in range(40):
            for key in keys:
                text = "Solve this: " + " ".join(rng.sample(words, 5))
                ctx = eng.decide("auto", [{"role": "user", "content": text}], deps).context
                eng.record_quality("cheap", "auto", None, 0.0, "signal", context=ctx, key=key)
        return before - part()
    one, three = moved(["a"]), moved(["a", "b", "c"])
    print(f"one key {one:.3f}, three keys {three:.3f}")
    assert 0.0 < one <= PullRule().max_pull + 1e-9
    assert three > PullRule().max_pull > one


def test_an_operators_reset_forgets_the_keys_recent_evidence_with_the_deployments():
    # The reset forgets the deployment's quality evidence in the store; the keys' window kept it,
    # and a key's next piece was weighed against evidence the estimate no longer held (found by a
    # review): after the reset it is the only key speaking, and counts fully.
    from aisia_plugin.litellm.runtime import Runtime
    from aisia_plugin.policy.loader import load_policy_with_locations
    from aisia_plugin.resources import policies_dir
    from aisia_plugin.state.memory import MemoryState

    rt = Runtime(load_policy_with_locations([policies_dir()]), store=MemoryState())
    eng = rt.engine
    for _ in range(30):
        eng.record_quality("cheap", "auto", None, 0.9, "feedback", key="peer")
    held = [eng.record_quality("cheap", "auto", None, 0.0, "feedback", key="other").weight for _ in range(10)]
    assert held[-1] < eng.quality.weight("feedback")  # bounded by the peer's evidence
    rt.reset("cheap")
    assert eng.quality_estimate("cheap", None) == pytest.approx(eng.quality.prior("cheap", None))
    after = eng.record_quality("cheap", "auto", None, 0.0, "feedback", key="other")
    assert after.weight == eng.quality.weight("feedback")


def test_a_local_first_escalations_evidence_is_weighed_as_the_callers():
    # A local-first escalation records the local answer's low confidence as signal evidence against
    # the local deployment; it named no key, so a client sending prompts the local model answers
    # unsure of moved its quality without a bound (found by a review). It is the caller's now.
    from types import SimpleNamespace

    from aisia_plugin.litellm.escalation import _evidence
    from aisia_plugin.litellm.observability import Observer
    from aisia_plugin.litellm.runtime import Runtime
    from aisia_plugin.policy.loader import load_policy_with_locations
    from aisia_plugin.resources import policies_dir
    from aisia_plugin.state.memory import MemoryState

    rt = Runtime(load_policy_with_locations([policies_dir()]), store=MemoryState())
    plugin = SimpleNamespace(runtime=rt, observer=Observer(rt))  # the two parts _evidence reads
    for _ in range(30):
        rt.engine.record_quality("gpu", "auto", None, 0.9, "feedback", key="peer")
    estimate = rt.engine.quality_estimate("gpu", None)
    for i in range(200):
        _evidence(plugin, f"r{i}", "gpu", "auto", None, 0.05, 1.0, "hostile")
    counted, _ = rt.engine.key_pulls.weights("gpu", "hostile")
    assert 0.0 < counted < 200 * 0.5  # the key's pieces were weighed: most of their weight refused
    assert estimate - rt.engine.quality_estimate("gpu", None) <= PullRule().max_pull + 1e-9


def test_a_hot_reload_keeps_the_keys_recent_evidence():
    # A reload builds a new engine over the same store: the quality estimate it reads is the one
    # learned before, so the keys' window must come with it. With an empty window a key the others
    # held to its bound was alone again after each reload, and its next pieces counted fully.
    from aisia_plugin.litellm.runtime import Runtime
    from aisia_plugin.policy.loader import load_policy_with_locations
    from aisia_plugin.resources import policies_dir
    from aisia_plugin.state.memory import MemoryState

    loaded = load_policy_with_locations([policies_dir()])
    rt = Runtime(loaded, store=MemoryState())
    for _ in range(30):
        rt.engine.record_quality("cheap", "auto", None, 0.9, "feedback", key="peer")
    estimate = rt.engine.quality_estimate("cheap", None)
    for _ in range(50):
        rt.engine.record_quality("cheap", "auto", None, 0.0, "feedback", key="hostile")
    before = rt.engine
    rt.swap(loaded, rt.new_engine(loaded.policy))  # what the policy watcher does (reload.py)
    assert rt.engine is not before
    after = [rt.engine.record_quality("cheap", "auto", None, 0.0, "feedback", key="hostile").weight
             for _ in range(50)]
    assert max(after) < rt.engine.quality.weight("feedback")  # weighed against the peer's evidence
    assert estimate - rt.engine.quality_estimate("cheap", None) <= PullRule().max_pull + 1e-9
