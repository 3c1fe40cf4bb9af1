"""``Decision.ranking``: the order the proxy hands LiteLLM its candidates in (the choice first),
read from the decision's facts without building the explanation rows (``Explainer.ranked``),
equals its readable reading from the rows, for every shipped alias and every strategy, on
learned state with open breakers and exclusions."""

from __future__ import annotations

import random

import pytest

from aisia_plugin.decision import Decision, ranking_of
from aisia_plugin.engine import Engine
from aisia_plugin.outcome import Outcome
from aisia_plugin.policy import load_policy
from helpers import deployment

POLICY = load_policy()
DEPLOYMENTS = [deployment(f"d{i}", cost=0.1 * (i % 5 + 1), provider=("openai", "groq", "deepseek")[i % 3])
               for i in range(12)]
PROMPTS = ["Hello there", "Write a Python function that merges two sorted lists",
           "Traduis ce texte en anglais s'il te plaît", "Prove that the square root of two is irrational"]


def reference_ranking(decision: Decision) -> list:
    """The plain reading: the rows that competed (not excluded), the chosen one first, the
    others by score, highest first, ties and scoreless rows in row order."""
    rows = [r for r in decision.scores if r.excluded is None]
    rest = [r for r in rows if r.id != decision.deployment_id]
    numeric = [r for r in rest if isinstance(r.score, (int, float)) and r.score == r.score]
    numeric.sort(key=lambda r: -r.score)  # stable: ties keep row order
    return [decision.deployment_id] + [r.id for r in numeric] + [r.id for r in rest if r not in numeric]


@pytest.mark.parametrize("alias", sorted(a for a in POLICY.aliases if a != "auto/offline"))
def test_ranking_from_the_facts_equals_the_rows_reading(alias):
    rng = random.Random(3)
    engine = Engine(POLICY, clock=lambda: 1000.0, rng=random.Random(0))
    for _ in range(300):  # learned state: qualities, latencies, some failures (breakers open)
        d = engine.decide(alias, [{"role": "user", "content": rng.choice(PROMPTS)}], DEPLOYMENTS)
        dep = d.deployment_id or rng.choice(DEPLOYMENTS).id
        failed = dep in ("d3", "d7") or rng.random() < 0.05
        engine.record(d if d.deployment_id else alias,
                      Outcome(dep, not failed, latency_s=rng.uniform(0.05, 3.0), status_code=500 if failed else 200,
                              quality=None if failed else rng.random()))
    for k in range(40):
        prompt = [{"role": "user", "content": PROMPTS[k % len(PROMPTS)]}]
        d = engine.decide(alias, prompt, DEPLOYMENTS, exclude=["d1"] if k % 3 == 0 else ())
        if d.refused:
            continue
        fast = d.ranking()
        assert fast == reference_ranking(d), (alias, k)
        assert fast[0] == d.deployment_id and len(set(fast)) == len(fast)
        assert "d1" not in fast or k % 3 != 0


def test_ranking_of_puts_the_choice_first_then_scores_best_first_then_the_scoreless():
    nan, inf = float("nan"), float("inf")
    pairs = [("a", 0.5), ("b", None), ("c", 0.9), ("d", nan), ("e", 0.5), ("f", -inf), ("g", 1), ("h", -0.0),
             ("i", 0.0)]
    # ties (0.5, 0.5; -0.0, 0.0) in pool order; None and NaN last, in pool order; an int is a score
    assert ranking_of(pairs, "e") == ["e", "g", "c", "a", "h", "i", "f", "b", "d"]
    assert ranking_of(pairs, None) == [None, "g", "c", "a", "e", "h", "i", "f", "b", "d"]
    assert ranking_of([], "z") == ["z"]
