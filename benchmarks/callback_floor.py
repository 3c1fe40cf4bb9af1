"""The least a router built as a LiteLLM callback with the plugin's interface can cost the proxy.

``floor``: a CustomLogger that overrides exactly the hooks AisiaPlugin overrides and does no work
in them (the alias served by LiteLLM's own routing group, the deployments LiteLLM offers kept,
five fixed ``x-aisia-*`` headers). What its proxy costs over plain LiteLLM is what LiteLLM does
because such a callback is there: the part of the alias's cost no callback can remove. ``bare``,
a CustomLogger that overrides nothing, splits it into what LiteLLM does for any callback and what
it does for the hooks the plugin overrides. profile_proxy.py's group mode counts both and
proxy_overhead.py times the floor, each loading this file from beside its proxy's config
(proxy_rig.py). It imports no part of the plugin, so that its proxy's heap holds none of it;
the group mode and tests/test_callback_floor.py check that it overrides the plugin's hooks."""

from __future__ import annotations

from litellm.integrations.custom_logger import CustomLogger

# Values about as long as the plugin sends for the benchmark's alias (h11 checks every byte; the plugin
# sends a 32-character request id and "ucb1 picked bench-1 of 1 candidate").
HEADERS = {"x-aisia-alias": "auto/bench", "x-aisia-strategy": "ucb1", "x-aisia-domain": "coding",
           "x-aisia-reason": "ucb1: bench-1, the only candidate",
           "x-aisia-request-id": "aisia-0123456789abcdef0123456789abcdef"}


class CallbackFloor(CustomLogger):
    async def async_pre_call_hook(self, user_api_key_dict, cache, data: dict, call_type):
        return data

    async def async_filter_deployments(self, model, healthy_deployments, messages, request_kwargs=None,
                                       parent_otel_span=None):
        return healthy_deployments

    async def async_pre_call_deployment_hook(self, kwargs, call_type):
        return None

    async def async_post_call_failure_deployment_hook(self, request_data, exception, call_type, fallback_depth=None):
        return None

    async def async_post_call_success_deployment_hook(self, request_data, response, call_type):
        return None

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        return None

    async def async_log_failure_event(self, kwargs, response_obj, start_time, end_time):
        return None

    async def async_post_call_success_hook(self, data, user_api_key_dict, response):
        return None  # the answer as it is (the plugin's local-first may replace it)

    async def async_post_call_response_headers_hook(self, data, user_api_key_dict, response, request_headers=None,
                                                    litellm_call_info=None):
        return HEADERS if str(data.get("model", "")).startswith("auto/") else None

    async def async_post_call_failure_hook(self, request_data, original_exception, user_api_key_dict,
                                           traceback_str=None):
        return None


def overridden(cls) -> set:
    """The CustomLogger hooks `cls` defines itself (what LiteLLM's capability checks look at)."""
    return {name for name in vars(cls) if callable(getattr(CustomLogger, name, None)) and name != "__init__"}


floor, bare = CallbackFloor(), CustomLogger()
