"""Through a real LiteLLM proxy: three teams' users complain about the answers of the deployment
they share, each team through its own key (LiteLLM's ``custom_auth``), and the deployment's
quality estimate learns from all of them (docs/security.md#tenants: a key's pull on the estimate
is bounded, and keys that agree learn together). Under the rule before (each key's share of the
recent evidence capped at 10 %), the three keys capped one another after the first pieces: 1.37
of the 18 complaints' weight of 9.0 counted, and the estimate moved from 0.500 to 0.343 (0.125
now; seen at 3c29a3c)."""

from __future__ import annotations

import itertools
import time

import openai
import pytest

from aisia_plugin.policy import load_policy
from fault_helpers import start_custom_auth_proxy, stats, wait_for
from proxy_harness import upstreams_fixture

pytestmark = pytest.mark.proxy

DEP = "kt-shared"
ALIAS = "kt/shared"
KEYS = {f"sk-kt-team-{t}": {"role": "internal_user", "team_id": f"team-{t}"} for t in "abc"}
POLICY = f"""\
version: 1
aliases:
  {ALIAS}:
    description: one deployment, shared by three teams
    strategy: cost
    candidates: {{models: [{DEP}]}}
"""
ROUNDS = 6  # complaints per team: under the per-key bound on signals (20 an hour by default)
_questions = itertools.count()

upstreams = upstreams_fixture([{"name": DEP, "input_cost_per_1m": 1.0, "output_cost_per_1m": 1.0}])


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, upstreams):
    p = start_custom_auth_proxy(tmp_path_factory.mktemp("keys-together"), upstreams, POLICY, KEYS)
    yield p
    p.stop()


def complain(proxy, key: str) -> None:
    """A conversation of the key's team: a question, the deployment's answer, and the user's
    complaint about it in the next turn."""
    client = openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0, timeout=60)
    history = [{"role": "user", "content": f"Question {next(_questions)}: what is the capital of Australia?"}]
    answer = client.chat.completions.create(model=ALIAS, messages=history).choices[0].message.content
    history += [{"role": "assistant", "content": answer}, {"role": "user", "content": "That's wrong."}]
    client.chat.completions.create(model=ALIAS, messages=history)


def quality(proxy) -> dict:
    return stats(proxy)[DEP]["quality"]


def test_three_teams_complaints_about_the_deployment_they_share_all_count(proxy):
    key = next(iter(KEYS))
    openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0, timeout=60).chat.completions.create(
        model=ALIAS, messages=[{"role": "user", "content": "Hello"}])  # (the deployment's row in the stats)
    wait_for(lambda: DEP in stats(proxy), f"{DEP} in the stats", limit_s=30, every_s=0.1)
    before = quality(proxy)["estimate"]
    for _ in range(ROUNDS):
        for key in KEYS:
            complain(proxy, key)
    want = ROUNDS * len(KEYS)
    wait_for(lambda: quality(proxy)["evidence"]["signal"] == want, f"{want} signals recorded", limit_s=30,
             every_s=0.1, detail=lambda: quality(proxy)["evidence"])
    time.sleep(1.0)  # and nothing more arrives
    after = quality(proxy)
    assert after["evidence"]["signal"] == want
    moved = before - after["estimate"]
    print(f"{len(KEYS)} teams, {want} complaints: {DEP}'s quality {before:.3f} -> {after['estimate']:.3f}")
    # Each complaint agrees with the others: every one counts, at its full weight (a correction,
    # -1, at the signal's weight 0.5: the policy's defaults), and the estimate falls from the
    # prior 0.5 (3 pseudo-observations) to about 1.5 / 12 = 0.125.
    policy = load_policy()
    full = want * policy.quality.evidence.signal * abs(policy.signals.weights.correction)
    assert after["evidence_weight"] == pytest.approx(full, rel=0.01)  # (less a little forgetting)
    assert moved > 0.35
