"""From LiteLLM deployment dicts (or replay candidates) to Deployments, and alias selectors.

What the router knows about a deployment beyond LiteLLM's config (specialities, tier, locality,
tags, prices, provider) is an annotation, the schema's `DeploymentAnnotation`. It may be written
in two places, both checked by that one schema definition:

- the policy's `deployments:` section, keyed by globs (the most specific matching key wins);
- the deployment's own `model_info.aisia` mapping in LiteLLM's config.

They merge field by field and the deployment's own mapping wins: it is written next to the one
deployment it describes, while a policy glob may cover many. Tags are added together (with
`litellm_params.tags`), specialities merged per domain.

Locality, when neither says, is inferred: a local-serving provider (`ollama/`, `ollama_chat/`,
`hosted_vllm/`, `lm_studio/`, `llamafile/`) or an `api_base` on loopback makes a deployment
local, so `auto/offline` works on a plain config.

Pure: LiteLLM's model cost map reaches here only as an optional lookup function supplied by the
integration, so the core never imports LiteLLM."""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional
from urllib.parse import urlsplit

from .decision import Deployment
from .globs import matches_any, most_specific
from .policy.errors import PolicyError, PolicyIssue, dotted
from .policy.models import DeploymentAnnotation, Policy, Selector

# (litellm model string) -> (input USD per token, output USD per token) or None
CostLookup = Callable[[str], Optional[tuple[float, float]]]

LOCAL_PROVIDERS = frozenset({"ollama", "ollama_chat", "hosted_vllm", "lm_studio", "llamafile"})
ANNOTATION_KEY = "aisia"  # model_info.aisia


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


def infer_local(model: str, params: Mapping) -> bool:
    """Whether a deployment serves from this machine: a local-serving provider, or an api_base
    on loopback (localhost, 127.0.0.0/8, ::1)."""
    provider = params.get("custom_llm_provider")
    if not isinstance(provider, str) or not provider:
        provider = model.split("/", 1)[0] if "/" in model else ""
    if provider.lower() in LOCAL_PROVIDERS:
        return True
    base = params.get("api_base") or params.get("base_url")
    return isinstance(base, str) and is_loopback_url(base)


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


def build_deployment(raw: Mapping, policy: Policy, cost_lookup: CostLookup | None = None, *,
                     source: Source | None = None) -> Deployment:
    """A LiteLLM deployment dict {model_name, litellm_params, model_info} as a Deployment.

    Raises DeploymentError (every problem of the dict, located) for a malformed one."""
    issues: list[PolicyIssue] = []
    dep = _build(raw, policy, cost_lookup, source, issues)
    if issues:
        raise DeploymentError(issues)
    return dep


def build_deployments(raws: Iterable, policy: Policy, cost_lookup: CostLookup | None = None, *,
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
        dep = _build(raw, policy, cost_lookup, src, issues)
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


def load_deployments_file(path, policy: Policy, cost_lookup: CostLookup | None = None) -> list[Deployment]:
    """The deployments of a LiteLLM config file (its `model_list`), every error located as
    file:line:column. Raises DeploymentError; OSError when the file cannot be read."""
    from .policy.yamlpos import load_yaml_with_positions, position_of

    file = str(path)
    text = Path(path).read_text(encoding="utf-8")
    data, locs, issues = load_yaml_with_positions(text, file)
    if issues:
        raise DeploymentError(issues)
    if not isinstance(data, dict) or "model_list" not in data:
        raise DeploymentError([PolicyIssue(file, 1, 1, "", "expected a LiteLLM config: a mapping with a 'model_list' key")])
    models = data["model_list"]
    if not isinstance(models, list):
        pos = position_of(locs, ("model_list",))
        raise DeploymentError([PolicyIssue(file, pos.line if pos else 0, pos.column if pos else 0, "model_list",
                                           "must be a list of deployments")])
    return build_deployments(models, policy, cost_lookup, source=Source(file, locs, ("model_list",)))


def _given_id(raw) -> Optional[str]:
    info = raw.get("model_info") if isinstance(raw, Mapping) else None
    value = info.get("id") if isinstance(info, Mapping) else None
    if value is None and isinstance(raw, Mapping):
        value = raw.get("id")
    return str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value) else None


def _with_id(d: Deployment, new_id: str) -> Deployment:
    return Deployment(id=new_id, model_name=d.model_name, model=d.model, provider=d.provider, tier=d.tier,
                      local=d.local, tags=d.tags, input_cost_per_1m=d.input_cost_per_1m,
                      output_cost_per_1m=d.output_cost_per_1m, specialities=d.specialities)


def _build(raw, policy: Policy, cost_lookup, source: Optional[Source], issues: list) -> Optional[Deployment]:
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

    ann = annotation_for(policy, dep_id, model_name, model)
    field = _merged_field(ann, own)
    provider = field("provider") or provider_raw or provider_of(model)
    local = field("local")
    if local is None:
        local = infer_local(model, params)
    tags = tuple(dict.fromkeys([*(tags_raw or []), *(ann.tags if ann else []), *(own.get("tags") or [])]))
    specialities = {**(ann.specialities if ann else {}), **(own.get("specialities") or {})}
    price_ann = (field("input_cost_per_1m"), field("output_cost_per_1m"))
    in_cost, out_cost = resolve_costs(policy, model, provider, prices, price_ann, cost_lookup)
    return Deployment(id=dep_id, model_name=model_name, model=model, provider=provider, tier=field("tier"),
                      local=bool(local), tags=tags, input_cost_per_1m=in_cost, output_cost_per_1m=out_cost,
                      specialities=specialities)


def _merged_field(ann: Optional[DeploymentAnnotation], own: dict):
    def field(name: str):
        if own.get(name) is not None:
            return own[name]
        return getattr(ann, name) if ann is not None else None
    return field


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


def _token_prices(params: Mapping, info: Mapping, sink: _Issues) -> Optional[tuple[float, float]]:
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
        return inp * 1e6, values.get("output_cost_per_token", inp) * 1e6
    return None


def annotation_for(policy: Policy, *names: str):
    key = most_specific(policy.deployments.keys(), names)
    return policy.deployments[key] if key is not None else None


def resolve_costs(policy, model, provider, prices, annotated=(None, None), cost_lookup=None) -> tuple[float, float]:
    """Price per 1M tokens: the annotation, else the deployment's own per-token price (`prices`,
    already per 1M), else LiteLLM's model cost map, else the provider-prefix table, else the
    policy's default. A lookup answer that is not a finite price >= 0 is ignored."""
    inp, out = annotated
    if inp is not None:
        return inp, out if out is not None else inp
    if prices is not None:
        return prices
    if cost_lookup is not None:
        found = cost_lookup(model)
        if found is not None:
            a, b = _price(found[0]), _price(found[1])
            if a is not None and b is not None:
                return a * 1e6, b * 1e6
    table = policy.costs.by_provider_prefix
    for key in (provider, provider_of(model)):
        if key in table:
            return table[key], table[key]
    return policy.costs.default_per_1m, policy.costs.default_per_1m


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
