"""An alias over a whole model list (the shipped ``auto``) does per-candidate work on every
attempt: the ranked copies handed to LiteLLM, on deployments of every shape, and the pool's
costs kept with the alias (issue 21)."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # importing litellm must not reach the network

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from aisia_plugin.litellm import deciding  # noqa: E402


class _Decision:
    def __init__(self, model):
        self.model = model


class _Params(dict):
    """A dict subclass: not the shape the fast path serves."""


_IDS = st.sampled_from(["a", "b", "c", "d", 7, None, ""])
_MODELS = st.sampled_from(["openai/a", "openai/b", "", None])


@st.composite
def _raw(draw):
    """A deployment as LiteLLM hands it to the filter, or in a shape it never does."""
    raw = {"model_name": draw(st.sampled_from(["m1", "m2"]))}
    info = draw(st.sampled_from(["dict", "dict", "dict", "none", "missing", "empty"]))
    if info == "dict":
        raw["model_info"] = {"id": draw(_IDS), "base_model": "x", "input_cost_per_token": 1e-6}
    elif info == "none":
        raw["model_info"] = None
    elif info == "empty":
        raw["model_info"] = {}
    shape = draw(st.sampled_from(["dict", "dict", "dict", "none", "missing", "sub"]))
    if shape != "missing":
        params = {"model": draw(_MODELS), "api_key": "k", "output_cost_per_token": 2e-6}
        if draw(st.booleans()):
            params["order"] = 9
        raw["litellm_params"] = None if shape == "none" else _Params(params) if shape == "sub" else params
    if draw(st.booleans()):  # litellm_params after model_info, or not there at all
        raw = dict(reversed(list(raw.items())))
    return _Params(raw) if draw(st.integers(0, 5)) == 0 else raw


@given(st.lists(_raw(), max_size=6), st.lists(st.sampled_from(["a", "b", "c", "d", "7", "None", "x"]), max_size=6),
       _MODELS)
@settings(max_examples=1000, deadline=None)
def test_ranked_deployments_are_fresh_copies_in_rank_order(healthy, ranked, model):
    """Deployments of every shape: the copies handed back carry their rank as ``order``, the
    choice its specialised model, and never share a dict with the Router's own."""
    out = deciding.ranked_deployments(healthy, ranked, _Decision(model))
    if out is healthy:  # no ranked id among them: LiteLLM's list as it was
        assert not any(str((h.get("model_info") or {}).get("id")) in ranked for h in healthy)
        return
    assert [d["litellm_params"]["order"] for d in out] == sorted(d["litellm_params"]["order"] for d in out)
    own = {id(h) for h in healthy} | {id(h.get("litellm_params")) for h in healthy}
    assert not any(id(d) in own or id(d["litellm_params"]) in own for d in out)
    first = out[0]
    if first["litellm_params"]["order"] == 1 and model:
        assert first["litellm_params"]["model"] == model


def test_ranked_deployments_of_the_usual_shape():
    healthy = [{"model_name": "m", "litellm_params": {"model": f"openai/{i}"}, "model_info": {"id": i}}
               for i in "abc"]
    out = deciding.ranked_deployments(healthy, ["b", "a", "c"], _Decision("openai/special"))
    assert [(d["model_info"]["id"], d["litellm_params"]["order"], d["litellm_params"]["model"]) for d in out] == [
        ("b", 1, "openai/special"), ("a", 2, "openai/a"), ("c", 3, "openai/c")]
    assert all("order" not in h["litellm_params"] for h in healthy)  # the Router's dicts untouched


def test_the_pools_costs_kept_with_the_alias_pool_are_its_deployments_costs(tmp_path, monkeypatch):
    """The engine hands a pool the costs its memoised candidates keep, and a pool cut down
    (a deployment already tried, over budget, or too small for the prompt) computes its own:
    either way the deployments' costs per 1M tokens, in pool order."""
    import random

    from helpers import deployment, spy_on_strategies

    from aisia_plugin.engine import Engine
    from aisia_plugin.policy import load_policy

    (tmp_path / "p.yaml").write_text("version: 1\naliases:\n  auto: {strategy: ucb1}\n"
                                     "  auto/cheap: {strategy: ucb1, budget: {max_cost_per_request_usd: 0.00001}}\n")
    eng = Engine(load_policy([tmp_path / "p.yaml"]), clock=lambda: 1000.0, rng=random.Random(1))
    deps = [deployment("a-1", 0.5), deployment("b-2", 40.0), deployment("c-3", 3.0, max_input_tokens=5)]
    seen = []
    spy_on_strategies(monkeypatch, seen, lambda pool, ctx: (pool, list(pool.costs)))
    msg = [{"role": "user", "content": "hi"}]
    long_msg = [{"role": "user", "content": "a long prompt " * 40}]
    for alias, messages, exclude in (("auto", msg, ()), ("auto", msg, ("b-2",)), ("auto/cheap", msg, ()),
                                     ("auto", long_msg, ()), ("auto", msg, ())):
        eng.decide(alias, messages, deps, exclude=exclude)
    assert len(seen) == 5
    for pool, costs in seen:
        assert costs == [d.cost_per_1m for d in pool.deployments]
    assert [len(pool) for pool, _ in seen] == [3, 2, 1, 2, 3]
    assert type(seen[0][0].costs) is tuple and seen[0][0].costs is seen[4][0].costs  # kept with the alias's pool
