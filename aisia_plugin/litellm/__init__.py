"""The LiteLLM integration: ``litellm_settings: {callbacks: ["aisia_plugin.litellm.plugin"]}``.

LiteLLM imports this module and takes its ``plugin`` attribute: a CustomLogger instance that
reads the policy named by ``AISIA_POLICY`` (layered over the shipped defaults). Everything that
touches LiteLLM lives in this package.

The instance is made (and its policy loaded) when ``plugin`` is first read, which LiteLLM does
right after the import, inside its config loading: a command line tool importing another module
of this package (``costs``, to price deployments as the proxy does) starts no plugin."""

__all__ = ["AisiaPlugin", "plugin"]


def __getattr__(name: str):
    if name == "AisiaPlugin":
        from .callback import AisiaPlugin

        return AisiaPlugin
    if name == "plugin":
        from .callback import AisiaPlugin

        instance = AisiaPlugin()
        instance.boot()
        globals()["plugin"] = instance  # later reads find it without coming here
        return instance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
