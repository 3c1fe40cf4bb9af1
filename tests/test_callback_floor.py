"""benchmarks/callback_floor.py, the do-nothing callback profile_proxy.py's group mode measures the
plugin against: it must switch on the same LiteLLM paths as the plugin, so it overrides the same
hooks, and serve a request as LiteLLM would without it."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # importing litellm must not reach the network
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from callback_floor import HEADERS, CallbackFloor, overridden  # noqa: E402

from aisia_plugin.litellm.callback import AisiaPlugin  # noqa: E402


def test_the_floor_overrides_exactly_the_plugins_hooks():
    assert overridden(CallbackFloor) == overridden(AisiaPlugin)
    assert "async_post_call_response_headers_hook" in overridden(CallbackFloor)


def test_the_floor_changes_nothing_and_sends_headers_only_on_alias_answers():
    floor, rows = CallbackFloor(), [{"model_name": "m", "litellm_params": {"model": "openai/m"}}]
    data = {"model": "auto/bench", "messages": []}

    async def run():
        return (await floor.async_pre_call_hook(None, None, data, "acompletion"),
                await floor.async_filter_deployments("auto/bench", rows, []),
                await floor.async_post_call_response_headers_hook(data, None, None),
                await floor.async_post_call_response_headers_hook({"model": "m"}, None, None))

    pre, kept, alias_headers, plain_headers = asyncio.run(run())
    assert pre is data and kept is rows
    assert alias_headers == HEADERS and plain_headers is None


def test_the_counts_list_each_arms_rounds_once_where_one_arm_stands_for_another():
    # The count mode's `group` at one deployment is the litellm arm's count (one proxy serves both).
    import profile_proxy

    litellm = {"per_request": 39e6, "rounds": [39.1e6, 39e6, 38.9e6]}
    alias = {"per_request": 40.5e6, "rounds": [40.5e6, 40.6e6, 40.4e6]}
    text = profile_proxy._count_text(60, 200, "", ["deployments"], [["1"]],
                                     {1: {"litellm": litellm, "alias": alias, "group": litellm}})
    rounds = [line for line in text.splitlines() if line.startswith("| 1 | ")]
    assert rounds == ["| 1 | litellm | 39.100 | 39.000 | 38.900 | 0.0051 |",
                      "| 1 | alias | 40.500 | 40.600 | 40.400 | 0.0049 |"]
