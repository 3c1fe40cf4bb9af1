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



# LiteLLM's cooldown of a deployment after a failed attempt (1.108.7,
# ``Router.deployment_callback_on_failure``, run from the attempt's sync failure callbacks): it
# counts the failure in the deployment's minute (``increment_deployment_failures_for_current_minute``),
# then cools the deployment down for ``cooldown_time`` seconds, read first from the deployment's
# ``model_info``, then from the attempt's ``litellm_params`` (a documented deployment setting),
# unless that time is 0 (``cooldown_handlers._should_run_cooldown_logic``: "time_to_cooldown is
# effectively 0"). The per-attempt failure hook gets a copy of the exception
# (``utils._snapshot_exception_for_hook``), but the attempt's logging object as it is: the plugin
# sets that attempt's ``cooldown_time`` to 0 there, before LiteLLM's callback reads it.
_SAVED_COOLDOWN = "aisia_cooldown_time"  # the attempt's own cooldown_time, put back when a later attempt counts


def _attempt_params(request_data) -> Optional[dict]:
    """The failed attempt's ``litellm_params`` as LiteLLM's failure callbacks will read them: those
    of its logging object (the per-attempt hook's request), or the event's own (a logging event's
    kwargs are the logging object's ``model_call_details``)."""
    logging_obj = request_data.get("litellm_logging_obj") if hasattr(request_data, "get") else None
    details = getattr(logging_obj, "model_call_details", None) if logging_obj is not None else request_data
    params = details.get("litellm_params") if isinstance(details, dict) else None
    return params if isinstance(params, dict) else None


def litellm_cooldown_sees(request_data, exception, sees: bool) -> bool:
    """Whether LiteLLM's cooldown is to see a failed attempt (`sees`), told before its failure
    callback runs (docs/failures.md#litellms-own-cooldown): not seen, the attempt's cooldown time
    is 0 and a live exception carries LiteLLM's "not the deployment's health" mark; seen, the
    attempt's own cooldown time is put back. Whether it could be told (False where the attempt's
    parameters cannot be reached: LiteLLM then cools down as it would)."""
    params = _attempt_params(request_data)
    if sees:
        if params is not None and _SAVED_COOLDOWN in params:
            params["cooldown_time"] = params.pop(_SAVED_COOLDOWN)
        return True
    told = False
    if params is not None:
        params.setdefault(_SAVED_COOLDOWN, params.get("cooldown_time"))
        params["cooldown_time"] = 0
        told = True
    if COOLDOWN_MARKER is not None and isinstance(exception, BaseException):
        try:
            COOLDOWN_MARKER(exception)  # (a copy, from the per-attempt hook: read by nobody)
            told = True
        except (AttributeError, TypeError):  # an exception type that refuses attributes
            pass
    return told


def _cooldown_marker():
    """LiteLLM's own mark for "this failure is not the selected deployment's health"
    (``router_utils/cooldown_handlers.py``, ``mark_advisor_orchestration_failure``, 1.108.7): an
    attribute set on the exception, which ``Router.deployment_callback_on_failure`` and the
    fallback cooldown (``fallback_event_handlers._trigger_cooldown_for_failed_deployment``) read
    first, before they count the failure or cool the deployment down; the exception's type, the
    retries and the client's error are unchanged. None where the installed LiteLLM has no such
    mark: its cooldown then counts every failure (docs/failures.md#litellms-own-cooldown)."""
    try:
        from litellm.router_utils.cooldown_handlers import mark_advisor_orchestration_failure
    except ImportError:
        return None
    return mark_advisor_orchestration_failure


COOLDOWN_MARKER = _cooldown_marker()

