"""Team and key layers of a policy (docs/teams.md), without a proxy: the loader builds each
layer over the operator's policy and locates its errors; the tenant is read from LiteLLM's auth
record only; a request's limits are validated; the narrowing rule; a reload swaps the layers.
tests/test_teams_proxy.py runs the same through a real LiteLLM proxy."""

from __future__ import annotations

import json
import textwrap

import pytest

from aisia_plugin.commands import validate
from aisia_plugin.decision import Deployment
from aisia_plugin.litellm.tenancy import LimitProblem, RequestLimits, Tenant, request_limits, tenant_of
from aisia_plugin.policy import PolicyError
from aisia_plugin.policy.layers import LayerRef, layer_for, left_out, narrows
from aisia_plugin.policy.loader import load_policy_with_locations

OPERATOR = """\
version: 1
defaults: false
aliases:
  t/main:
    description: the operator's
    strategy: cost
    candidates: {models: [tm-*], tiers: [free, pro, ultra]}
    budget: {max_cost_per_request_usd: 0.5}
deployments:
  tm-cheap: {tier: free}
  tm-mid: {tier: pro}
  tm-top: {tier: ultra}
"""


def write(tmp_path, extra: str, name: str = "p.yaml"):
    path = tmp_path / name
    path.write_text(OPERATOR + textwrap.dedent(extra))
    return path


def issues_of(path) -> list[str]:
    with pytest.raises(PolicyError) as err:
        load_policy_with_locations([path])
    return [i.format() for i in err.value.issues]


def test_a_layer_inherits_what_it_does_not_set_and_the_operator_policy_is_unchanged(tmp_path):
    loaded = load_policy_with_locations([write(tmp_path, """\
        teams:
          team-a:
            aliases:
              t/main: {strategy: latency, budget: {mode: strict}}
            reward: {latency_weight: 0.9}
        layers:
          gold:
            aliases:
              t/main: {candidates: {tiers: [ultra]}}
        """)])
    team = loaded.layers[LayerRef("teams", "team-a")]
    alias = team.aliases["t/main"]
    assert (alias.strategy, alias.description, alias.budget.mode, alias.budget.max_cost_per_request_usd) == \
        ("latency", "the operator's", "strict", 0.5)
    assert alias.candidates.tiers == ["free", "pro", "ultra"] and team.reward.latency_weight == 0.9
    gold = loaded.layers[LayerRef("layers", "gold")].aliases["t/main"]
    assert gold.candidates.tiers == ["ultra"] and gold.candidates.models == ["tm-*"] and gold.strategy == "cost"
    op = loaded.policy.aliases["t/main"]
    assert (op.strategy, op.budget.mode, loaded.policy.reward.latency_weight) != ("latency", "strict", 0.9)
    assert op.strategy == "cost" and op.budget.mode == "soft"


def test_layer_errors_are_located_in_their_file_and_line(tmp_path):
    path = write(tmp_path, """\
        teams:
          team-a:
            aliases:
              t/main: {stratgy: latency}
        """)
    assert issues_of(path) == [f"{path}:16:16: teams.team-a.aliases.t/main.stratgy: unknown key 'stratgy'; "
                               "did you mean 'strategy'?"]
    path = write(tmp_path, """\
        teams:
          beta:
            aliases:
              t/mian: {strategy: latency}
          gamma:
            aliases:
              t/main: {candidates: {tiers: [standard]}}
          delta:
            aliases:
              t/main: {candidates: {locality: local}, strategy: cheapest}
        """)
    found = issues_of(path)
    assert found[0].startswith(f"{path}:16:7: teams.beta.aliases.t/mian: the operator's policy defines no alias "
                               "'t/mian'") and "did you mean 't/main'?" in found[0]
    assert found[1].startswith(f"{path}:19:36: teams.gamma.aliases.t/main.candidates.tiers: leaves alias 't/main' "
                               "without candidates")
    assert found[2].startswith(f"{path}:22:57: teams.delta.aliases.t/main.strategy: unknown strategy 'cheapest'")
    assert len(found) == 3


def test_validate_with_deployments_finds_a_layer_alias_left_without_candidates(tmp_path):
    path = write(tmp_path, """\
        teams:
          team-a:
            aliases:
              t/main: {candidates: {ids: [tm-nothing]}}
        """)
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"model_list": [
        {"model_name": n, "litellm_params": {"model": f"openai/{n}", "input_cost_per_token": 1e-7,
                                             "output_cost_per_token": 1e-7}, "model_info": {"id": n}}
        for n in ("tm-cheap", "tm-mid", "tm-top")]}))
    assert validate.check([path]).status == validate.EXIT_OK  # without deployments nothing says it
    report = validate.check([path], deployments=config)
    assert report.status == validate.EXIT_INVALID
    assert [i.path for i in report.issues] == ["teams.team-a.aliases.t/main"]
    assert "without candidates" in report.issues[0].message and report.issues[0].line == 16


class Auth:
    """What LiteLLM's auth returns (UserAPIKeyAuth's fields that tenancy reads)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_the_tenant_comes_from_the_auth_record_only():
    t = tenant_of(Auth(token="hashed-by-litellm", team_id="t-1", team_alias="alpha", user_role="internal_user",
                       metadata={"aisia_policy": "gold"}, models=["t/main", "tm-mid"]))
    assert (t.team_id, t.team_alias, t.key_layer, t.models, t.admin) == ("t-1", "alpha", "gold", ("t/main", "tm-mid"),
                                                                        False)
    assert t.key_hash and "hashed-by-litellm" not in t.key_hash
    # The team's models apply when the key has none; LiteLLM's "every model" names restrict nothing.
    assert tenant_of(Auth(team_models=["tm-top"])).models == ("tm-top",)
    assert tenant_of(Auth(models=["all-proxy-models"])).models == ()
    assert tenant_of(Auth(user_role="proxy_admin")).admin and tenant_of(object()) == Tenant()


def test_layer_precedence_key_layer_then_team_id_then_team_alias():
    layers = {LayerRef("teams", "t-1"): 1, LayerRef("teams", "alpha"): 2, LayerRef("layers", "gold"): 3}
    assert layer_for(layers, "t-1", "alpha", None) == LayerRef("teams", "t-1")
    assert layer_for(layers, "t-9", "alpha", None) == LayerRef("teams", "alpha")
    assert layer_for(layers, "t-1", "alpha", "gold") == LayerRef("layers", "gold")
    assert layer_for(layers, "t-1", "alpha", "missing") is None and layer_for(layers, None, None, None) is None


@pytest.mark.parametrize("data,expected", [
    ({}, RequestLimits()),
    ({"proxy_server_request": {"headers": {"X-Aisia-Min-Tier": " Pro "}}}, RequestLimits("pro", None)),
    ({"metadata": {"aisia_max_cost_usd": 0.01}}, RequestLimits(None, 0.01)),
    ({"proxy_server_request": {"headers": {"x-aisia-max-cost-usd": "0.5"}}, "metadata": {"aisia_min_tier": "free"}},
     RequestLimits("free", 0.5)),
])
def test_request_limits_are_read_from_headers_or_metadata(data, expected):
    assert request_limits(data) == expected


@pytest.mark.parametrize("data,param", [
    ({"proxy_server_request": {"headers": {"x-aisia-min-tier": "gold"}}}, "x-aisia-min-tier"),
    ({"proxy_server_request": {"headers": {"x-aisia-max-cost-usd": "a lot"}}}, "x-aisia-max-cost-usd"),
    ({"proxy_server_request": {"headers": {"x-aisia-max-cost-usd": "0"}}}, "x-aisia-max-cost-usd"),
    ({"metadata": {"aisia_max_cost_usd": "inf"}}, "metadata.aisia_max_cost_usd"),
    ({"metadata": {"aisia_max_cost_usd": True}}, "metadata.aisia_max_cost_usd"),
    ({"metadata": {"aisia_min_tier": ["pro"]}}, "metadata.aisia_min_tier"),
])
def test_a_bad_request_limit_is_a_problem_never_ignored(data, param):
    problem = request_limits(data)
    assert isinstance(problem, LimitProblem) and problem.param == param and param in problem.message


def dep(name, tier, tags=()):
    return Deployment(name, name, f"openai/{name}", "openai", tier=tier, tags=tuple(tags))


def test_narrowing_never_widens_and_says_why(tmp_path):
    loaded = load_policy_with_locations([write(tmp_path, "")])
    op = loaded.policy.aliases["t/main"]
    deps = [dep("tm-cheap", "free"), dep("tm-mid", "pro"), dep("tm-top", "ultra"), dep("other", "ultra")]
    ref = LayerRef("teams", "a")
    why = left_out("t/main", ref, op, deps, deps)
    assert list(why) == ["other"] and "operator's alias" in why["other"]
    assert left_out("t/main", None, op, deps, deps) == {}  # the operator's own selector is the engine's
    # What the proxy skips the views for (litellm/layering.left_out): nothing narrows, nothing left out.
    assert not narrows(None, (), None) and narrows(ref) and narrows(None, ["tm-top"]) and narrows(None, (), "pro")
    why = left_out("t/main", None, op, deps, deps, models=["t/main", "tm-top"], min_tier="pro")
    assert why == {"tm-cheap": "not among the models the key may use", "tm-mid": "not among the models the key may use",
                   "other": "not among the models the key may use"}
    # A key given the alias itself and none of its groups may use the alias as a whole.
    assert left_out("t/main", None, op, deps, deps, models=["t/main"]) == {}
    why = left_out("t/main", None, op, deps, [dep("tm-cheap", None), *deps[1:]], min_tier="standard")
    assert why == {"tm-cheap": "tier unknown is below the request's minimum tier standard"}
