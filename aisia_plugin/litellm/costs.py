"""LiteLLM's own price of a deployment, as the price lookup ``deployments.build_deployment`` takes.

A deployment is priced by the calculation LiteLLM bills it with after a request
(``Logging.response_cost_calculator`` -> ``litellm.completion_cost``): the model as ``completion``
passes it (``get_llm_provider``: without its provider prefix), the provider, ``base_model``
(``litellm_params`` or ``model_info``, Azure's way of naming the priced model), custom pricing
(any custom price key in ``litellm_params`` or ``model_info``: LiteLLM then prices the entry the
Router registered under the deployment's id) and the provider-aware lookup of the cost map. So the
price the router ranks and budgets with is the ``x-litellm-response-cost`` of the same tokens.

The same model info gives a deployment's context window (``context_window``) and what it can
take (``litellm_capabilities``: images, tools, a JSON schema...; docs/capabilities.md).

Custom prices reach ``litellm.model_cost`` only when a Router registers its deployments: inside the
proxy it has; outside it (``aisia explain``, ``aisia validate``) ``router_deployments`` builds a
Router from the config's model list, as the proxy does at start."""

from __future__ import annotations

import copy
import logging
import os
import sys
from contextlib import contextmanager
from dataclasses import replace
from typing import Mapping, Optional

if "litellm" not in sys.modules:
    # Imported first by a command line tool (`aisia explain`, `aisia validate`), not by the proxy:
    # LiteLLM would fetch its cost map over the network at import, and retry for seconds when
    # offline. The map bundled with the installed LiteLLM, unless the environment says otherwise.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
from litellm.litellm_core_utils.litellm_logging import use_custom_pricing_for_model

from ..capabilities import LITELLM_KEYS, merged
from ..deployments import ConfigFile, DeploymentError, Price, PriceLookup, config_deployments
from ..policy.errors import PolicyIssue

# Token counts priced to read a per-token price off LiteLLM's calculation: small enough to stay
# below the tiered prices some models have above 128k or 200k tokens.
_PROBE_TOKENS = 1000


def context_window(raw) -> Optional[int]:
    """The most input tokens a deployment takes, as LiteLLM's pre-call checks read it: the
    deployment's own ``model_info.max_input_tokens``, else LiteLLM's model info for its
    ``base_model`` or model. None when LiteLLM does not know."""
    info = raw.get("model_info") or {}
    value = info.get("max_input_tokens")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    for _, found in _model_infos(raw):
        found = found.get("max_input_tokens")
        if isinstance(found, int) and not isinstance(found, bool) and found > 0:
            return found
    return None


def _model_infos(raw: Mapping):
    """(name, LiteLLM's model info) of the names a deployment may be known by in LiteLLM's map:
    ``model_info.base_model``, ``litellm_params.base_model``, its model; the names LiteLLM does
    not know are skipped."""
    info = raw.get("model_info") or {}
    params = raw.get("litellm_params") or {}
    for name in (info.get("base_model"), params.get("base_model"), params.get("model")):
        if not isinstance(name, str) or not name:
            continue
        try:
            found = litellm.get_model_info(name)
        except Exception:  # LiteLLM raises for a model its map does not know
            continue
        if isinstance(found, Mapping):
            yield name, found


def litellm_capabilities(raw: Mapping) -> tuple[dict, dict]:
    """What a deployment can take as LiteLLM reads it (docs/capabilities.md): the deployment's
    own ``model_info.supports_*`` flags, else the model info of the first name LiteLLM's map
    lists as a model (an entry with a ``mode``; the Router registers an empty one for every
    model it serves, which says nothing), where a flag left out means no, as LiteLLM's own
    ``supports_vision`` and the like read it. (capability -> bool, capability -> source); a
    model LiteLLM does not list: nothing (unknown)."""
    info = raw.get("model_info") or {}
    own = {name: info.get(key) for name, key in LITELLM_KEYS.items()} if isinstance(info, Mapping) else {}
    layers = [("model_info.supports_* of the deployment", own)]
    for name, found in _model_infos(raw):
        if isinstance(found.get("mode"), str):
            layers.append((f"LiteLLM's model info for {found.get('key') or name}",
                           {cap: found.get(key) is True for cap, key in LITELLM_KEYS.items()}))
            break
    return merged(*layers)


def litellm_price(raw: Mapping) -> Optional[Price]:
    """LiteLLM's price of one deployment dict of the Router's model list (USD per 1M tokens),
    with its source; None when LiteLLM has none (it bills such a request None)."""
    params = raw.get("litellm_params") if isinstance(raw, Mapping) else None
    info = raw.get("model_info") if isinstance(raw, Mapping) else None
    params = params if isinstance(params, Mapping) else {}
    info = info if isinstance(info, Mapping) else {}
    configured = params.get("model")
    if not isinstance(configured, str) or not configured:
        return None
    try:
        model, provider, _, _ = litellm.get_llm_provider(model=configured,
                                                         custom_llm_provider=params.get("custom_llm_provider"))
    except Exception:  # LiteLLM does not know the provider: it cannot price (nor call) it
        return None
    base_model = params.get("base_model") or info.get("base_model")
    base_model = base_model if isinstance(base_model, str) and base_model else None
    custom = _custom_pricing(params, info)
    model_id = info.get("id")

    def cost(prompt_tokens: int, completion_tokens: int) -> float:
        response = litellm.ModelResponse(model=model, usage=litellm.Usage(
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens))
        return litellm.completion_cost(completion_response=response, model=model, custom_llm_provider=provider,
                                       base_model=base_model, custom_pricing=custom,
                                       router_model_id=str(model_id) if model_id is not None else None,
                                       call_type="acompletion")

    key = None
    if not custom:
        key = _priced_key(base_model or model, None if base_model else provider)
        if key is None:
            return None
    try:
        per_input, per_output = cost(_PROBE_TOKENS, 0), cost(0, _PROBE_TOKENS)
    except Exception:  # "This model isn't mapped yet": LiteLLM has no price
        return None
    if not isinstance(per_input, (int, float)) or not isinstance(per_output, (int, float)):
        return None
    scale = 1e6 / _PROBE_TOKENS
    if custom:
        where = "litellm_params" if use_custom_pricing_for_model(dict(params)) else "model_info"
        source = f"litellm: custom price in {where}"
    elif base_model is not None:
        source = f"litellm cost map: {key} ({'litellm_params' if params.get('base_model') else 'model_info'}.base_model)"
    else:
        source = f"litellm cost map: {key}"
    return Price(per_input * scale, per_output * scale, source, True)


def _priced_key(model: str, provider: Optional[str]) -> Optional[str]:
    """The cost map entry LiteLLM's provider-aware lookup finds for a model, when that entry
    states a price. A Router registers an empty entry for every model it serves, which LiteLLM
    then prices at 0 in its logs while its `x-litellm-response-cost` header says None: such a
    model is unpriced, not free (a self-hosted model the map does list, like `ollama/llama3`, is
    free: its entry says 0)."""
    try:
        key = litellm.get_model_info(model=model, custom_llm_provider=provider).get("key")
    except Exception:  # "This model isn't mapped yet"
        return None
    entry = litellm.model_cost.get(key) if isinstance(key, str) else None
    if not isinstance(entry, Mapping):
        return None
    if all(entry.get(k) is None for k in ("input_cost_per_token", "output_cost_per_token")):
        return None
    return key


def _custom_pricing(params: Mapping, info: Mapping) -> bool:
    """Whether LiteLLM prices the deployment with its own custom prices, as its logging decides
    (``use_custom_pricing_for_model``: the Router passes model_info in the call's metadata)."""
    return bool(use_custom_pricing_for_model({**params, "metadata": {"model_info": dict(info)}}))


@contextmanager
def quiet_litellm(*names: str):
    """LiteLLM's loggers ``names`` (default: ``LiteLLM`` and ``LiteLLM Router``) at ERROR inside the block."""
    loggers = [logging.getLogger(name) for name in names or ("LiteLLM", "LiteLLM Router")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def router_deployments(model_list: list) -> list:
    """The deployments of a config's model list as the proxy's Router holds them, their prices
    registered in ``litellm.model_cost`` as the proxy's Router registers them at start. Raises
    what the Router raises for a model list it refuses (the proxy would not start either)."""
    # LiteLLM logs its notes on the prices it registers (a custom price of a model its map does
    # not list...) when the proxy starts; a command line tool building the same Router is quiet.
    with quiet_litellm():
        router = litellm.Router(model_list=copy.deepcopy(model_list))
    return list(router.model_list)


def config_price_lookup(model_list: list) -> PriceLookup:
    """A price lookup for the entries of a config's model list (the very dicts of that list):
    each is priced as its Router deployment (the same position and model_name, else the same id)
    is priced inside the proxy."""
    routed = router_deployments(model_list)
    by_id = {str((r.get("model_info") or {}).get("id")): r for r in routed}
    by_entry = {}
    for k, raw in enumerate(model_list):
        if not isinstance(raw, Mapping):
            continue
        twin = routed[k] if k < len(routed) and routed[k].get("model_name") == raw.get("model_name") else None
        given = (raw.get("model_info") or {}).get("id") if isinstance(raw.get("model_info"), Mapping) else None
        if given is not None and str(given) in by_id:
            twin = by_id[str(given)]
        if twin is not None:
            by_entry[id(raw)] = twin

    def lookup(raw: Mapping) -> Optional[Price]:
        twin = by_entry.get(id(raw))
        return litellm_price(twin) if twin is not None else None
    return lookup


def proxy_deployments(config: ConfigFile, policy) -> list:
    """The Deployments the proxy builds from a LiteLLM config file: its model list checked (every
    error located), then priced by LiteLLM as the proxy's Router and logging price it. Raises
    DeploymentError, located at `model_list`, when LiteLLM's Router refuses the list."""
    config_deployments(config, policy)  # located errors first: the Router's would not be
    try:
        lookup = config_price_lookup(config.model_list)
    except Exception as exc:  # what the Router raises for a list it refuses varies by release
        line, column = config.where(("model_list",))
        raise DeploymentError([PolicyIssue(config.file, line, column, "model_list",
                                           f"LiteLLM's Router refuses this model list (the proxy would not start): "
                                           f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")]) from None
    deps = config_deployments(config, policy, lookup)
    if len(deps) == len(config.model_list):  # one Deployment per entry, in order
        deps = [with_context_window(d, raw) for d, raw in zip(deps, config.model_list)]
    return deps


def with_context_window(dep, raw: Mapping):
    """`dep` knowing its context window as LiteLLM reads it (``context_window``), unless it
    declares one itself, and its capabilities (``litellm_capabilities``) where its annotation
    does not set them: what the proxy and the command-line tools both decide with."""
    window = context_window(raw) if dep.max_input_tokens is None else None
    if window is not None:
        dep = replace(dep, max_input_tokens=window)
    caps, sources = litellm_capabilities(raw)
    if any(name not in dep.capabilities for name in caps):
        dep = replace(dep, capabilities={**caps, **dep.capabilities},
                      capability_sources={**sources, **dep.capability_sources})
    return dep
