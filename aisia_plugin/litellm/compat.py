"""What differs between the LiteLLM Router generations the plugin supports, in one place.

- 1.108 and 1.109 (the Python router: ``router.py``, then ``router_python_core.py``): the
  deployments ``async_filter_deployments`` returns are the ones LiteLLM's later steps read (its
  pre-call checks, tag filter, order filter), ``litellm_params`` included. The filter hands it
  every allowed candidate as copies ranked through ``litellm_params.order``; the order filter then
  sends the best one its checks kept.
- 1.110 (the Rust core, ``router_rust/``): ``router_rust/steps/callbacks.py``
  (``_answer_callback_filters``) keeps only the ids of what the filters return
  (``filtered_ids``), the core's strategy then picks among them at random, and its tag filter and
  pre-call checks run after the filters. A copy's ``order`` and ``litellm_params`` are not read.
  The filter returns its choice alone; a choice the later checks refuse (no deployment is sent)
  costs one of LiteLLM's retries, and the next pass offers the next-ranked candidate.

The per-attempt hooks (``async_pre_call_deployment_hook``, ``async_post_call_*_deployment_hook``)
and the logging events run in every generation."""

from __future__ import annotations

import importlib.util
from typing import Optional


def _has_rust_router() -> bool:
    try:
        return importlib.util.find_spec("litellm.router_rust") is not None
    except (ImportError, ValueError):
        return False


# Whether the Router reads the deployments the filter returns (their ``litellm_params``,
# ``order`` included) or only their ids.
FILTER_KEEPS_IDS_ONLY = _has_rust_router()


def outside_declared_range() -> Optional[str]:
    """Why the installed LiteLLM is outside the range this package declares (pyproject.toml, read
    from the installed metadata: the one home of the range), or None. pip keeps to the range
    unless told not to (``--no-deps``, a forced reinstall of LiteLLM afterwards)."""
    try:
        from importlib.metadata import PackageNotFoundError, requires, version

        from packaging.requirements import Requirement

        installed = version("litellm")
        declared = next((r for r in map(Requirement, requires("aisia_plugin") or ())
                         if r.name == "litellm" and r.marker is None), None)
    except (PackageNotFoundError, ImportError, ValueError):
        return None
    if declared is None or declared.specifier.contains(installed, prereleases=True):
        return None
    return (f"LiteLLM {installed} is outside the versions aisia_plugin is tested with (litellm{declared.specifier}); "
            f"see docs/proxy.md#litellm-versions")
