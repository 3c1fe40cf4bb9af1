"""From LiteLLM deployment dicts (or replay candidates) to Deployments, and alias selectors.

What the router knows about a deployment beyond LiteLLM's config (specialities, tier, locality,
tags, prices, provider) is an annotation, the schema's `DeploymentAnnotation`. It may be written
in two places, both checked by that one schema definition:

- the policy's `deployments:` section, keyed by globs (the most specific matching key wins);
- the deployment's own `model_info.aisia` mapping in LiteLLM's config.

They merge field by field and the deployment's own mapping wins: it is written next to the one
deployment it describes, while a policy glob may cover many. Tags are added together (with
`litellm_params.tags`), specialities merged per domain.

Locality, when neither says, is inferred from the provider: a self-hosted one (`ollama/`,
`hosted_vllm/`, `lm_studio/`, ... SELF_HOSTED_PROVIDERS) makes a deployment local, so
`auto/offline` works on a plain config. A loopback `api_base` alone does not: a cloud provider
reached through a local egress proxy or sidecar listens on loopback too.

Prices: one price, the one LiteLLM bills. The integration supplies LiteLLM's own pricing of a
deployment (custom prices, `base_model`, the provider-aware cost map) as a PriceLookup, so the
core never imports LiteLLM; the policy's costs table only fills in where LiteLLM has no price,
and every Deployment says which source priced it (`price_source`)."""

from __future__ import annotations

import dataclasses
import ipaddress
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional
from urllib.parse import urlsplit

from .capabilities import merged
from .decision import Deployment
from .globs import matches_any, most_specific
from .policy.errors import PolicyError, PolicyIssue, dotted
from .policy.models import DeploymentAnnotation, Policy, Selector

# LiteLLM providers that serve a model the operator runs (a server on this machine or in its own
# network), not a vendor's API: local for auto/offline, free unless priced.
SELF_HOSTED_PROVIDERS = frozenset({"ollama", "ollama_chat", "hosted_vllm", "vllm", "lm_studio", "llamafile",
                                   "xinference", "oobabooga", "triton", "lemonade", "docker_model_runner"})
ANNOTATION_KEY = "aisia"  # model_info.aisia


@dataclass(frozen=True)
class Price:
    """USD per 1M input and output tokens, and what set them: `basis`, one of PRICE_BASES, and
    `source`, the same for a reader (shown by `aisia explain` and `/aisia/policy`). `billed` is
    whether LiteLLM prices the deployment itself (its spend is tracked at this price): None when
    LiteLLM was not asked (no lookup supplied)."""

    input_per_1m: float
    output_per_1m: float
    source: str
    billed: Optional[bool] = None
    basis: str = "litellm"


# annotation: the policy or model_info.aisia; litellm: LiteLLM's pricing; config: the deployment's
# own per-token prices, LiteLLM not asked; table: costs.by_provider_prefix; self-hosted: free;
# default: costs.default_per_1m. The last three are the router's guesses where nobody priced it.
PRICE_BASES = ("annotation", "litellm", "config", "table", "self-hosted", "default")


# A LiteLLM deployment dict -> LiteLLM's own price for it (Price with billed=True), or None when
# LiteLLM has none (it would bill the requests None).
PriceLookup = Callable[[Mapping], Optional[Price]]


class DeploymentError(PolicyError):
    """A LiteLLM deployment the router cannot use. Carries every issue found, each naming the
    file and line when the deployments came from a file with positions, else the deployment id,
    and the field."""

    def __str__(self) -> str:
        return "\n".join(i.format() if i.line else f"{i.file}: {i.path or '<deployment>'}: {i.message}"
                         for i in self.issues) or "invalid deployment"


@dataclass(frozen=True)
class Source:
    """Where a deployment dict was written: the file, its positions (policy.yamlpos), and the
    deployment's path in it (("model_list", 3))."""

    file: str
    locations: dict  # policy.yamlpos.Locations
    path: tuple = ()


def provider_of(model: str) -> str:
    """The seed's provider prefix: 'groq/llama-3' -> 'groq', 'cerebras-llama' -> 'cerebras'."""
    head = model.split("/", 1)[0] if "/" in model else model
    return head.split("-", 1)[0].lower()


def provider_in(model: str, params: Mapping) -> str:
    """LiteLLM's provider of a deployment: `custom_llm_provider`, else the model's prefix."""
    provider = params.get("custom_llm_provider")
    if not isinstance(provider, str) or not provider:
        provider = model.split("/", 1)[0] if "/" in model else ""
    return provider.lower()


def locality(model: str, params: Mapping) -> tuple[bool, str]:
    """Whether a deployment serves from the operator's own machines, and why: a self-hosted
    provider is local; any other is not, even on a loopback api_base (an egress proxy or a
    sidecar in front of a cloud API listens there too)."""
    provider = provider_in(model, params)
    base = params.get("api_base") or params.get("base_url")
    on_loopback = isinstance(base, str) and is_loopback_url(base)
    if provider in SELF_HOSTED_PROVIDERS:
        return True, f"self-hosted provider {provider}/" + (" on loopback" if on_loopback else "")
    if on_loopback:
        return False, f"provider {provider or model}/ is not self-hosted (a loopback api_base alone does not count)"
    return False, f"provider {provider or model}/ is not self-hosted"


def infer_local(model: str, params: Mapping) -> bool:
    """Whether a deployment serves from this machine when nothing says so (see `locality`)."""
    return locality(model, params)[0]


def is_loopback_url(url: str) -> bool:
    try:
        host = urlsplit(url if "://" in url else "http://" + url).hostname
    except ValueError:
        return False
    if not host:
        return False
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


class _Issues:
    """Collects the issues of one deployment, located by its Source or named by its id."""

    def __init__(self, source: Optional[Source], dep_id: str):
        self.source, self.dep_id, self.items = source, dep_id, []

    def where(self, path: tuple) -> tuple[str, int, int, str]:
        from .policy.yamlpos import position_of

        if self.source is None:
            return f"deployment {self.dep_id!r}", 0, 0, dotted(path)
        full = tuple(self.source.path) + tuple(path)
        pos = position_of(self.source.locations, full)
        return self.source.file, pos.line if pos else 0, pos.column if pos else 0, dotted(full)

    def add(self, path: tuple, message: str, kind: str = "schema"):
        file, line, col, where = self.where(path)
        self.items.append(PolicyIssue(file, line, col, where, message, kind))


def build_deployment(raw: Mapping, policy: Policy, price_lookup: PriceLookup | None = None, *,
                     source: Source | None = None) -> Deployment:
    """A LiteLLM deployment dict {model_name, litellm_params, model_info} as a Deployment, priced
    by `price_lookup` (LiteLLM's pricing, from the integration) where no annotation prices it.

    Raises DeploymentError (every problem of the dict, located) for a malformed one."""
    issues: list[PolicyIssue] = []
    dep = _build(raw, policy, price_lookup, source, issues)
    if issues:
        raise DeploymentError(issues)
    return dep


def build_deployments(raws: Iterable, policy: Policy, price_lookup: PriceLookup | None = None, *,
                      source: Source | None = None) -> list[Deployment]:
    """Every deployment of a model list, checked together: one DeploymentError lists the
    problems of all of them, and a deployment id given twice is one (both would be chosen at
    once). A deployment without an id takes its model_name, suffixed #2, #3... when several
    share it (LiteLLM derives its own ids at run time)."""
    issues: list[PolicyIssue] = []
    out: list[Deployment] = []
    first_at: dict[str, int] = {}
    explicit: set[str] = set()
    for k, raw in enumerate(raws):
        src = Source(source.file, source.locations, tuple(source.path) + (k,)) if source is not None else None
        n_before = len(issues)
        dep = _build(raw, policy, price_lookup, src, issues)
        if dep is None or len(issues) > n_before:
            continue
        given = _given_id(raw)
        if dep.id in first_at:
            if given is not None and dep.id in explicit:
                sink = _Issues(src, dep.id)
                first = out[first_at[dep.id]]
                where = _Issues(Source(source.file, source.locations, tuple(source.path) + (first_at[dep.id],))
                                if source is not None else None, first.id).where(())
                shown = f"{where[0]}:{where[1]}" if where[1] else f"deployment #{first_at[dep.id] + 1}"
                sink.add(("model_info", "id"), f"duplicate deployment id {dep.id!r} (also at {shown}): "
                                               "ids must be unique, or one decision would choose two deployments")
                issues.extend(sink.items)
                continue
            n = 2
            while f"{dep.id}#{n}" in first_at:
                n += 1
            dep = _with_id(dep, f"{dep.id}#{n}")
        if given is not None:
            explicit.add(dep.id)
        first_at[dep.id] = len(out)
        out.append(dep)
    if issues:
        raise DeploymentError(issues)
    return out


@dataclass(frozen=True)
class ConfigFile:
    """A LiteLLM config file as read: its data (a mapping with a `model_list` list), the
    positions of its nodes (policy.yamlpos) and its name."""

    file: str
    data: dict
    locations: dict

    @property
    def model_list(self) -> list:
        return self.data["model_list"]

    @property
    def router_settings(self) -> Mapping:
        value = self.data.get("router_settings")
        return value if isinstance(value, Mapping) else {}

    def where(self, path: tuple) -> tuple[int, int]:
        from .policy.yamlpos import position_of

        pos = position_of(self.locations, path)
        return (pos.line, pos.column) if pos else (0, 0)


def read_config_file(path) -> ConfigFile:
    """A LiteLLM config file, checked to have a `model_list` list. Raises DeploymentError (located);
    OSError when the file cannot be read."""
    from .policy.yamlpos import load_yaml_with_positions, position_of

    file = str(path)
    text = Path(path).read_text(encoding="utf-8")
    data, locs, issues = load_yaml_with_positions(text, file)
    if issues:
        raise DeploymentError(issues)
    if not isinstance(data, dict) or "model_list" not in data:
        raise DeploymentError([PolicyIssue(file, 1, 1, "", "expected a LiteLLM config: a mapping with a 'model_list' key")])
    if not isinstance(data["model_list"], list):
        pos = position_of(locs, ("model_list",))
        raise DeploymentError([PolicyIssue(file, pos.line if pos else 0, pos.column if pos else 0, "model_list",
                                           "must be a list of deployments")])
    return ConfigFile(file, data, locs)


def config_deployments(config: ConfigFile, policy: Policy, price_lookup: PriceLookup | None = None) -> list[Deployment]:
    """The deployments of a read LiteLLM config, every error located as file:line:column."""
    return build_deployments(config.model_list, policy, price_lookup, source=Source(config.file, config.locations,
                                                                                    ("model_list",)))


def load_deployments_file(path, policy: Policy, price_lookup: PriceLookup | None = None) -> list[Deployment]:
    """The deployments of a LiteLLM config file (its `model_list`), every error located as
    file:line:column. Raises DeploymentError; OSError when the file cannot be read."""
    return config_deployments(read_config_file(path), policy, price_lookup)


def _given_id(raw) -> Optional[str]:
    info = raw.get("model_info") if isinstance(raw, Mapping) else None
    value = info.get("id") if isinstance(info, Mapping) else None
    if value is None and isinstance(raw, Mapping):
        value = raw.get("id")
    return str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value) else None


def _with_id(d: Deployment, new_id: str) -> Deployment:
    return dataclasses.replace(d, id=new_id)


def _build(raw, policy: Policy, price_lookup, source: Optional[Source], issues: list) -> Optional[Deployment]:
    if not isinstance(raw, Mapping):
        sink = _Issues(source, "?")
        sink.add((), f"a deployment must be a mapping with model_name, litellm_params and model_info, "
                     f"got {type(raw).__name__}")
        issues.extend(sink.items)
        return None
    sink = _Issues(source, _given_id(raw) or str(raw.get("model_name") or "?"))
    params = _mapping(raw, "litellm_params", (), sink)
    info = _mapping(raw, "model_info", (), sink)
    model = _text(params, "model", ("litellm_params",), sink)
    model_name = _text(raw, "model_name", (), sink) or model
    model = model or model_name
    if not model:
        sink.add(("litellm_params", "model"), "a deployment needs litellm_params.model or a model_name")
    dep_id = _given_id(raw) or model_name
    if info.get("id") is not None and _given_id(raw) is None:
        sink.add(("model_info", "id"), f"must be a non-empty string, got {info.get('id')!r}")
    provider_raw = _text(params, "custom_llm_provider", ("litellm_params",), sink)
    tags_raw = params.get("tags")
    if tags_raw is not None and (not isinstance(tags_raw, list) or not all(isinstance(t, str) for t in tags_raw)):
        sink.add(("litellm_params", "tags"), "must be a list of strings")
        tags_raw = None
    for key in ("api_base", "base_url"):
        if params.get(key) is not None and not isinstance(params[key], str):
            sink.add(("litellm_params", key), f"must be a string (a URL), got {params[key]!r}")
    own = _own_annotation(info, policy, sink)
    prices = _token_prices(params, info, sink)
    if sink.items:
        issues.extend(sink.items)
        return None

    ann_key = annotation_key(policy, dep_id, model_name, model)
    ann = policy.deployments[ann_key] if ann_key is not None else None
    field, origin = _merged_field(ann, own, ann_key)
    provider = field("provider") or provider_raw or provider_of(model)
    local = field("local")
    if local is None:
        local, local_reason = locality(model, params)
    else:
        local_reason = f"{origin('local')}: local: {str(bool(local)).lower()}"
    tags = tuple(dict.fromkeys([*(tags_raw or []), *(ann.tags if ann else []), *(own.get("tags") or [])]))
    specialities = {**(ann.specialities if ann else {}), **(own.get("specialities") or {})}
    annotated = (field("input_cost_per_1m"), field("output_cost_per_1m"))
    price = resolve_price(policy, model, provider, prices, annotated,
                          price_lookup(raw) if price_lookup is not None else None,
                          litellm_asked=price_lookup is not None,
                          self_hosted=provider_in(model, params) in SELF_HOSTED_PROVIDERS,
                          annotation=origin("input_cost_per_1m" if annotated[0] is not None else "output_cost_per_1m"))
    caps, cap_sources = merged((f"model_info.{ANNOTATION_KEY}.capabilities", own.get("capabilities")),
                               (f"policy deployments.{ann_key}.capabilities", ann.capabilities if ann else None))
    return Deployment(id=dep_id, model_name=model_name, model=model, provider=provider, tier=field("tier"),
                      local=bool(local), tags=tags, input_cost_per_1m=price.input_per_1m,
                      output_cost_per_1m=price.output_per_1m, specialities=specialities, price_basis=price.basis,
                      price_source=price.source, priced_by_litellm=price.billed, local_reason=local_reason,
                      capabilities=caps, capability_sources=cap_sources)


def _merged_field(ann: Optional[DeploymentAnnotation], own: dict, ann_key: Optional[str]):
    """field(name): the deployment's own annotation's value, else the policy's; origin(name):
    where that value was written."""
    def field(name: str):
        if own.get(name) is not None:
            return own[name]
        return getattr(ann, name) if ann is not None else None

    def origin(name: str) -> str:
        if own.get(name) is not None:
            return f"model_info.{ANNOTATION_KEY}"
        return f"policy deployments.{ann_key}" if ann_key is not None else "annotation"
    return field, origin


def _mapping(raw: Mapping, key: str, base: tuple, sink: _Issues) -> Mapping:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        sink.add(base + (key,), f"must be a mapping, got {type(value).__name__} {value!r:.60}")
        return {}
    return value


def _text(raw: Mapping, key: str, base: tuple, sink: _Issues) -> str:
    value = raw.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        sink.add(base + (key,), f"must be a string, got {type(value).__name__} {value!r:.60}")
        return ""
    return value


def _own_annotation(info: Mapping, policy: Policy, sink: _Issues) -> dict:
    """model_info.aisia, checked by the schema's DeploymentAnnotation and against the policy's
    domains: the fields it sets (defaults are not filled: an absent field defers to the policy)."""
    from .policy.schema import definition_issues

    raw = info.get(ANNOTATION_KEY)
    if raw is None:
        return {}
    base = ("model_info", ANNOTATION_KEY)
    if sink.source is not None:
        file, locs, prefix = sink.source.file, sink.source.locations, tuple(sink.source.path) + base
    else:
        file, locs, prefix = f"deployment {sink.dep_id!r}", {}, base
    found = definition_issues("DeploymentAnnotation", raw, locs, file, prefix)
    sink.items.extend(found)
    if found or not isinstance(raw, Mapping):
        return {}
    for domain in raw.get("specialities") or {}:
        if domain not in policy.domains.definitions:
            known = ", ".join(policy.domains.definitions) or "none"
            sink.add(base + ("specialities", domain), f"unknown domain {domain!r}; the policy's domains: {known}",
                     "semantic")
    return dict(raw)


def _price(value) -> Optional[float]:
    """A per-token price as a float, or None when it is not a finite number >= 0. A numeric
    string counts (YAML 1.1 reads 1e-6 as text)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0:
        return float(value)
    return None


def _token_prices(params: Mapping, info: Mapping, sink: _Issues) -> Optional[Price]:
    """The deployment's own per-token prices (model_info first, then litellm_params), as USD per
    1M tokens, or None when it sets none."""
    for base, src in (("model_info", info), ("litellm_params", params)):
        if src.get("input_cost_per_token") is None:
            continue
        values = {}
        for key in ("input_cost_per_token", "output_cost_per_token"):
            if src.get(key) is None:
                continue
            price = _price(src[key])
            if price is None:
                sink.add((base, key), f"must be a number >= 0 (USD per token), got {src[key]!r:.60}")
            values[key] = price
        if any(v is None for v in values.values()):
            return None
        inp = values["input_cost_per_token"]
        return Price(inp * 1e6, values.get("output_cost_per_token", inp) * 1e6, f"{base}.input_cost_per_token",
                     basis="config")
    return None


def annotation_key(policy: Policy, *names: str) -> Optional[str]:
    """The policy's `deployments:` key that annotates a deployment of these names (the most
    specific matching glob), or None."""
    return most_specific(policy.deployments.keys(), names)


def annotation_for(policy: Policy, *names: str):
    key = annotation_key(policy, *names)
    return policy.deployments[key] if key is not None else None


def resolve_price(policy, model, provider, prices=None, annotated=(None, None), litellm_price: Optional[Price] = None,
                  *, litellm_asked: bool = False, self_hosted: bool = False, annotation: str = "annotation") -> Price:
    """USD per 1M tokens and their source, first found: the annotation (each of its two prices),
    LiteLLM's price, the deployment's own per-token prices (when LiteLLM was not asked: it would
    have priced them itself), the policy's provider-prefix table, free for a self-hosted provider,
    the policy's default. A LiteLLM answer that is not a finite price >= 0 counts as none.
    `billed`: whether LiteLLM prices it (None: not asked); an unpriced deployment's source says
    that LiteLLM bills it None."""
    if litellm_price is not None:
        a, b = _price(litellm_price.input_per_1m), _price(litellm_price.output_per_1m)
        litellm_price = Price(a, b, litellm_price.source, True) if a is not None and b is not None else None
    billed = (litellm_price is not None) if litellm_asked else None
    base = litellm_price or prices or _fallback_price(policy, model, provider, self_hosted)
    if billed is False:
        base = dataclasses.replace(base, source=f"{base.source} (LiteLLM has no price for {model}: it bills None)")
    inp, out = annotated
    if inp is None and out is None:
        return dataclasses.replace(base, billed=billed)
    if inp is not None and out is None:
        out = inp
    if inp is None:
        return Price(base.input_per_1m, out, f"{annotation} (output), {base.source} (input)", billed, "annotation")
    return Price(inp, out, annotation, billed, "annotation")


def _fallback_price(policy, model, provider, self_hosted: bool) -> Price:
    table = policy.costs.by_provider_prefix
    for key in (provider, provider_of(model)):
        if key in table:
            return Price(table[key], table[key], f"policy costs.by_provider_prefix.{key}", basis="table")
    if self_hosted:
        return Price(0.0, 0.0, "self-hosted: free", basis="self-hosted")
    return Price(policy.costs.default_per_1m, policy.costs.default_per_1m, "policy costs.default_per_1m",
                 basis="default")


def resolve_costs(policy, model, provider, prices=None, annotated=(None, None)) -> tuple[float, float]:
    """(input, output) USD per 1M tokens of `resolve_price`, without LiteLLM (replay candidates)."""
    price = resolve_price(policy, model, provider, prices, annotated,
                          self_hosted=provider_in(model, {}) in SELF_HOSTED_PROVIDERS)
    return price.input_per_1m, price.output_per_1m


def describe(d: Deployment) -> dict:
    """What the router takes a deployment to be, and why: its prices and their source, its
    locality and its reason (`aisia explain`, `/aisia/policy`)."""
    return {"id": d.id, "model_name": d.model_name, "model": d.model, "provider": d.provider, "tier": d.tier,
            "tags": list(d.tags), "input_cost_per_1m": d.input_cost_per_1m, "output_cost_per_1m": d.output_cost_per_1m,
            "price_basis": d.price_basis, "price_source": d.price_source, "priced_by_litellm": d.priced_by_litellm,
            "local": d.local,
            "local_reason": d.local_reason,
            "capabilities": {name: {"supported": value, "source": d.capability_sources.get(name, "")}
                             for name, value in d.capabilities.items()}}


def selects(selector: Selector, d: Deployment) -> bool:
    """Whether an alias's candidate selector keeps this deployment."""
    names = (d.model_name, d.id, d.model)
    if selector.models and not matches_any(selector.models, (d.model_name,)):
        return False
    if selector.ids and not matches_any(selector.ids, (d.id,)):
        return False
    if selector.tags and not set(selector.tags) & set(d.tags):
        return False
    if selector.providers and d.provider not in selector.providers:
        return False
    if selector.tiers and d.tier not in selector.tiers:
        return False
    if selector.locality == "local" and not d.local:
        return False
    if selector.locality == "remote" and d.local:
        return False
    if selector.exclude and matches_any(selector.exclude, names):
        return False
    return True
