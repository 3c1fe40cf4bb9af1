"""The LiteLLM integration: ``litellm_settings: {callbacks: ["aisia_plugin.litellm.plugin"]}``.

LiteLLM imports this module and takes its ``plugin`` attribute: a CustomLogger instance that
reads the policy named by ``AISIA_POLICY`` (layered over the shipped defaults). Everything that
touches LiteLLM lives in this package."""

from .callback import AisiaPlugin

plugin = AisiaPlugin()
plugin.boot()

__all__ = ["AisiaPlugin", "plugin"]
