"""aisia_plugin: adaptive routing of LiteLLM proxy requests for auto/* aliases."""

__version__ = "0.1.0"
