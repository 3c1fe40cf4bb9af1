"""Through a real LiteLLM proxy: a key asking for long answers, or sending huge prompts, moves another
team's `auto/fast`-like choice (the latency strategy) no further than the length caps say
(docs/design.md#latency-and-answer-length): each of its answers teaches at most the time 256 tokens
take on the deployment, to a prompt of at most 4,096 tokens.

The faster deployment answers in 20 ms plus 1 ms per output token and 0.05 ms per prompt token,
the other in 1 s plus as much; the usual answer is 40 tokens, the usual prompt a few. The hostile
key aims streamed answers of 1,500 tokens (about 1.5 s each) at the faster one through an alias
of that one candidate. Learned as measured (`latency_length_cap_tokens: 0` in this policy), eight
of them took its latency from 0.07 s to 1.59-1.64 s and the other team's share of it from 1.0 to 0.0;
with the cap, to 0.32-0.38 s and 1.0 (whole answers instead of streams, under the rule's first
form: 1.28 s and 0.259 s). Then streamed answers to prompts of 40,000 tokens (2 s each): learned
as measured (`latency_prompt_cap_tokens: 0`), 1.77 s and 1.0 -> 0.0; with the prompt cap,
0.23-0.25 s and 1.0."""

from __future__ import annotations

import httpx
import pytest

from fault_helpers import admin_get, explain_rows, start_custom_auth_proxy
from proxy_harness import start_upstreams, stop_upstreams

pytestmark = pytest.mark.proxy

ALIAS, ONLY = "t/fast", "t/quick-only"
HOSTILE, PLAIN = "sk-lat-hostile", "sk-lat-plain"
KEYS = {HOSTILE: {"role": "internal_user", "team_id": "team-hostile"},
        PLAIN: {"role": "internal_user", "team_id": "team-plain"}}
POLICY = f"""\
version: 1
defaults: false
aliases:
  {ALIAS}:
    description: the lowest p95 latency
    strategy: latency
    exploration: 0
    candidates: {{models: [lat-quick, lat-other]}}
  {ONLY}:
    description: one deployment (any alias of one candidate lets a key aim at it)
    strategy: ucb1
    candidates: {{models: [lat-quick]}}
bandit: {{initial_latency_s: 0}}  # both measured first (pool order, then the unmeasured one)
"""
LONG_WORDS, USUAL_WORDS = 1500, 40
PROMPT_MS_PER_TOKEN, HUGE_PROMPT_WORDS = 0.05, 40_000  # a huge prompt: 2 s to read


def answer_of_asked_length(name: str, messages: list) -> str:
    """A long answer when the prompt asks for one, else a usual one (a token a word)."""
    asked = str(messages[-1].get("content", ""))
    # (Words that differ: LiteLLM stops a stream that repeats one chunk.)
    return " ".join(f"w{k}" for k in range(LONG_WORDS if "at length" in asked else USUAL_WORDS))


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    running = start_upstreams([
        {"name": name, "latency_ms": ms, "ms_per_token": 1.0, "ms_per_prompt_token": PROMPT_MS_PER_TOKEN,
         "responder": answer_of_asked_length} for name, ms in (("lat-quick", 20), ("lat-other", 1000))])
    p = start_custom_auth_proxy(tmp_path_factory.mktemp("latency-isolation"), {u.name: u for u in running}, POLICY,
                                KEYS, litellm_settings={"request_timeout": 120})
    yield p
    p.stop()
    stop_upstreams(running)


def served(proxy, key: str, text: str, alias: str = ALIAS, stream: bool = False) -> str:
    body = {"model": alias, "messages": [{"role": "user", "content": text}], "stream": stream}
    with httpx.stream("POST", proxy.base_url + "/chat/completions", timeout=120, json=body,
                      headers={"Authorization": f"Bearer {key}"}) as r:
        read = r.read().decode()
        assert r.status_code == 200, read
        assert not stream or read.rstrip().endswith("data: [DONE]"), read[-200:]
    rows = explain_rows(proxy, r.headers["x-aisia-request-id"])  # its outcome learned
    assert rows and rows[-1]["outcome"]["success"], rows
    return r.headers["x-litellm-model-id"]


def latency_of(proxy, dep: str) -> float:
    return admin_get(proxy, "/admin/bandit/stats")[dep]["avg_latency"]


def a_keys_calls_against_the_others_choice(proxy, label: str, hostile_text) -> tuple[float, float]:
    """The faster deployment's learned latency before and after the hostile key's 8 streamed calls
    (`hostile_text(k)`, aimed at it through the alias of that one candidate: through `auto/fast`
    itself they would spread over both), asserting that the plain team's 10 choices before and
    after them all went to it."""
    # Warm-up: the faster one's first calls (the proxy's connections set up: a second or more, once)
    # forgotten by its EMA, so that the latency strategy does not leave it before it is known (in
    # the module's second test: its latency back to the usual answers'); then the other one
    # measured (unmeasured, it counts 0 s and is chosen once).
    for k in range(20):
        served(proxy, PLAIN, f"{label}: first question {k}", ONLY)
    for k in range(5):
        served(proxy, PLAIN, f"{label}: second question {k}")
    before = [served(proxy, PLAIN, f"{label}: question {k}") for k in range(10)]
    usual = latency_of(proxy, "lat-quick")
    hostile = [served(proxy, HOSTILE, hostile_text(k), ONLY, stream=True) for k in range(8)]
    taught = latency_of(proxy, "lat-quick")
    after = [served(proxy, PLAIN, f"{label}: another question {k}") for k in range(10)]
    print(f"lat-quick learned {usual:.3f} s, {taught:.3f} s after the {label}; "
          f"the plain team's share to it {before.count('lat-quick') / 10:.1f} -> {after.count('lat-quick') / 10:.1f}")
    assert hostile == ["lat-quick"] * 8
    assert before == after == ["lat-quick"] * 10
    return usual, taught


def test_a_keys_long_answers_move_the_others_latency_choice_at_most_to_the_caps_length(proxy):
    usual, taught = a_keys_calls_against_the_others_choice(
        proxy, "long answers", lambda k: f"tell me at length, take {k}")
    # Each long answer (about 1.5 s, and the proxy's time per chunk) taught at most the time of 256
    # tokens there (about 0.3 s streamed); learned as measured, 8 of them at weight 0.2 reach 1.6 s.
    assert usual < 0.2
    assert taught < 0.6
    assert latency_of(proxy, "lat-other") > 1.0


def huge_prompt(take: int) -> str:
    """A prompt of HUGE_PROMPT_WORDS words (a token each to the upstream), different every time."""
    return f"summarise this document, take {take}: " + " ".join(f"d{take}x{k}" for k in range(HUGE_PROMPT_WORDS))


def test_a_keys_huge_prompts_move_the_others_latency_choice_at_most_to_the_prompt_caps_length(proxy):
    # Each about 2 s (40,000 prompt tokens at 0.05 ms), with a usual answer.
    usual, taught = a_keys_calls_against_the_others_choice(proxy, "huge prompts", huge_prompt)
    # Each taught at most the time of its answer to a prompt of 4,096 tokens there (about 0.27 s);
    # learned as measured, 8 of them at weight 0.2 reach 1.7 s.
    assert usual < 0.2
    assert taught < 0.6
