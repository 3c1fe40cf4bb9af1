"""The policy language: loading, validation, merging and typed access.

The loader (YAML, JSON Schema) is imported on first use of ``load_policy`` and its siblings: the
routing core imports the typed models only, so importing the engine does not import yaml and
jsonschema."""

from .errors import PolicyError, PolicyIssue
from .models import Policy

_LOADER = ("default_policy_paths", "load_policy", "load_policy_with_locations", "default_domain_detector",
           "detect_domain")

__all__ = ["PolicyError", "PolicyIssue", "Policy", *_LOADER]


def __getattr__(name: str):
    if name in _LOADER:
        from . import loader

        return getattr(loader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
