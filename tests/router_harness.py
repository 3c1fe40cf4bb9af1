"""The test side of a LiteLLM Router used in this process (no proxy) with the plugin as its
callback: the Router-level tests build their Routers here. ``scripts/test_litellm_versions.sh
--router-only`` runs those tests against a plain ``litellm`` (no proxy installed)."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # importing litellm must not reach the network

import litellm  # noqa: E402

from aisia_plugin.litellm.callback import AisiaPlugin  # noqa: E402
from aisia_plugin.policy.loader import load_policy_with_locations  # noqa: E402


class PluginRouters:
    """Routers with a fresh plugin each (its own memory store) for the policy files given;
    ``close()`` restores LiteLLM's callbacks."""

    def __init__(self, policy_paths):
        self.policy_paths = list(policy_paths)
        self.saved = list(litellm.callbacks)
        self.plugins: list[AisiaPlugin] = []

    def make(self, model_list, **settings):
        """(a Router over `model_list` with `settings`, the plugin routing its aliases)."""
        plugin = AisiaPlugin(load_policy_with_locations(self.policy_paths))
        plugin.boot()
        self.plugins.append(plugin)
        router = litellm.Router(model_list=model_list, **settings)
        plugin.ensure_groups(router)
        litellm.callbacks = [plugin]
        return router, plugin

    def close(self) -> None:
        # LiteLLM copies a callback into its success and failure lists on first use: a plugin
        # left there would keep receiving the next test's logging events.
        for plugin in self.plugins:
            litellm.logging_callback_manager.remove_callback_from_all_lists(plugin)
        litellm.callbacks = self.saved
