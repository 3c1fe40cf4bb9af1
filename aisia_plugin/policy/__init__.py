"""The policy language: loading, validation, merging and typed access."""

from .errors import PolicyError, PolicyIssue
from .loader import default_policy_paths, load_policy, load_policy_with_locations
from .models import Policy

__all__ = ["PolicyError", "PolicyIssue", "Policy", "load_policy", "load_policy_with_locations", "default_policy_paths"]
