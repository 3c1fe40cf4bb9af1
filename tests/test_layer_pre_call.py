"""The pre-call hook reads an alias as the caller's layer sets it: a team's own `failover` and
`strategy` apply to its calls (before, the operator's alias was read before the layer was known,
and a team's failover.attempts and its lkgp's session were silently ignored; found by a review)."""

from __future__ import annotations

import pytest
from router_harness import PluginRouters

LAYERED = """\
version: 1
defaults: false
aliases:
  t/pair:
    description: two deployments
    strategy: ucb1
    candidates: {models: [fa, fb]}
    failover: {attempts: 2}
teams:
  t1:
    aliases:
      t/pair:
        failover: {attempts: 0}
        strategy: lkgp
"""


class Key:
    """A key as LiteLLM's auth resolves it (custom_auth's UserAPIKeyAuth fields the plugin reads)."""

    token = "hashed-key"
    api_key = None
    team_alias = None
    metadata: dict = {}
    models: list = []

    def __init__(self, team_id=None):
        self.team_id = team_id


def _dep(name: str) -> dict:
    return {"model_name": name,
            "litellm_params": {"model": f"openai/{name}", "api_base": "http://127.0.0.1:9/v1", "api_key": "sk-x"},
            "model_info": {"id": name, "input_cost_per_token": 1e-7, "output_cost_per_token": 1e-7}}


@pytest.mark.parametrize("team, attempts, lkgp", [("t1", 0, True), (None, 2, False)])
async def test_the_callers_layer_sets_the_alias_the_pre_call_hook_reads(tmp_path, team, attempts, lkgp):
    policy = tmp_path / "layered.yaml"
    policy.write_text(LAYERED)
    routers = PluginRouters([policy])
    try:
        _, plugin = routers.make([_dep("fa"), _dep("fb")])
        data = {"model": "t/pair", "messages": [{"role": "user", "content": "hi"}], "litellm_session_id": "sess-1"}
        data = await plugin.async_pre_call_hook(Key(team), None, data, "acompletion")
        (call,) = plugin.runtime.calls.values()
        assert (call.layer.name if call.layer else None) == team
        assert data["num_retries"] == attempts
        assert (call.session is not None) is lkgp  # lkgp keeps the conversation on its last good deployment
    finally:
        routers.close()
