"""Layers over the operator's policy (docs/teams.md): a team's (`teams:`, keyed by LiteLLM team
id or team alias) and the named ones a key selects through its LiteLLM metadata (`layers:`,
`aisia_policy: NAME`).

A layer holds partial `aliases`, `deployments` and `reward` sections. Its effective policy is the
operator's merged document (before schema defaults) with the layer laid over it, the layer's
values winning as the user's win over the shipped defaults; then defaults, semantic checks and the
typed model, as for any policy. Every issue is reported at the layer's own file and line, its
field path prefixed with the layer (``teams.<team>.aliases.auto.strategy``).

A layer refines the operator's aliases: one that names an alias the operator does not define is
an error, and one whose selector cannot share a deployment with the operator's (tiers,
providers or locality with nothing in common) leaves the alias without candidates, an error too.
At run time an alias of a layer chooses only among the deployments both selectors keep
(litellm/layering.py), so a layer narrows and never widens."""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass, replace

from pydantic import ValidationError

from ..deployments import selects
from ..globs import matches_any
from .errors import PolicyIssue, dotted
from .models import Policy
from .yamlpos import Locations, position_of

SECTIONS = ("teams", "layers")
TIER_ORDER = ("free", "standard", "pro", "ultra")  # the schema's tiers, cheapest first
LAYER_KEYS = ("aliases", "deployments", "reward")
_EMPTY = {"description": "", "aliases": {}, "deployments": {}, "reward": {}}


@dataclass(frozen=True)
class LayerRef:
    """Which layer: ``section`` is "teams" or "layers", ``name`` its key there."""

    section: str
    name: str

    @property
    def label(self) -> str:
        return f"{self.section}.{self.name}"


def _map(v) -> dict:
    return v if isinstance(v, dict) else {}


def split_layers(merged: dict) -> tuple[dict, dict]:
    """(the operator's document without its layers, {section: {name: layer as written}})."""
    base = {k: v for k, v in merged.items() if k not in SECTIONS}
    return base, {s: _map(merged.get(s)) for s in SECTIONS}


def typed_sections(raw: dict) -> dict:
    """The layers as the typed Policy holds them: each with its four sections present."""
    return {s: {name: {**_EMPTY, **_map(layer)} for name, layer in _map(raw.get(s)).items()} for s in SECTIONS}


def build_layers(base: dict, locs: Locations, raw: dict, operator: Policy, *, fill, check, merge
                 ) -> tuple[dict[LayerRef, Policy], list[PolicyIssue]]:
    """Each layer's effective policy, and every issue of every layer. `fill` fills schema
    defaults, `check(document, locations)` returns its semantic issues, `merge` is the loader's
    merge (``_merge_into``): the layer's values win."""
    out: dict[LayerRef, Policy] = {}
    issues: list[PolicyIssue] = []
    for section in SECTIONS:
        for name, layer in _map(raw.get(section)).items():
            ref = LayerRef(section, name)
            found = _reference_issues(ref, _map(layer), operator, locs)
            if found:
                issues.extend(found)
                continue
            policy, found = _layered(ref, _map(layer), base, locs, fill, check, merge)
            issues.extend(found)
            if policy is not None:
                out[ref] = policy
    return out, issues


def _issue(locs: Locations, path: tuple, message: str, key: bool = False) -> PolicyIssue:
    pos = position_of(locs, path, key=key)
    return PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0, pos.column if pos else 0,
                       dotted(path), message, "semantic")


def _reference_issues(ref: LayerRef, layer: dict, operator: Policy, locs: Locations) -> list[PolicyIssue]:
    """An alias the operator does not define; a selector sharing no deployment with the
    operator's (docs/teams.md#narrowing)."""
    issues = []
    known = sorted(operator.aliases)
    for alias, fields in _map(layer.get("aliases")).items():
        path = (ref.section, ref.name, "aliases", alias)
        op = operator.aliases.get(alias)
        if op is None:
            close = difflib.get_close_matches(str(alias), known, n=1, cutoff=0.5)
            hint = f"; did you mean '{close[0]}'?" if close else f"; the operator's aliases: {', '.join(known)}"
            issues.append(_issue(locs, path, f"the operator's policy defines no alias '{alias}': a layer refines "
                                 f"the operator's aliases, it cannot add one{hint}", key=True))
            continue
        mine = _map(_map(fields).get("candidates"))
        for field in ("tiers", "providers"):
            theirs, ours = list(getattr(op.candidates, field)), mine.get(field)
            if theirs and isinstance(ours, list) and ours and not set(theirs) & set(ours):
                issues.append(_issue(locs, path + ("candidates", field),
                                     f"leaves alias '{alias}' without candidates: the operator's selector keeps "
                                     f"{field} {theirs}, this layer's {ours}, and a layer only narrows"))
        where = mine.get("locality")
        if where in ("local", "remote") and op.candidates.locality in ("local", "remote") \
                and where != op.candidates.locality:
            issues.append(_issue(locs, path + ("candidates", "locality"),
                                 f"leaves alias '{alias}' without candidates: the operator's selector keeps "
                                 f"{op.candidates.locality} deployments only, this layer's {where} ones"))
    return issues


def _layered(ref: LayerRef, layer: dict, base: dict, locs: Locations, fill, check, merge):
    """(the layer's effective policy or None, its issues)."""
    prefix = (ref.section, ref.name)
    doc, doc_locs, issues = copy.deepcopy(base), dict(locs), []
    layer_locs = {k[2:]: v for k, v in locs.items() if k[:2] == prefix and len(k) > 2}
    merge(doc, {k: layer[k] for k in LAYER_KEYS if k in layer}, (), doc_locs, layer_locs, True, issues, "")
    filled = fill(doc)
    found = [replace(i, path=dotted(prefix + (i.path,)) if i.path else ref.label) for i in check(filled, doc_locs)]
    if found:
        return None, found
    try:
        return Policy.model_validate({**filled, "teams": {}, "layers": {}}), []
    except ValidationError as exc:
        out = []
        for e in exc.errors():
            path = tuple(e["loc"])
            pos = position_of(doc_locs, path)
            out.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0,
                                   pos.column if pos else 0, dotted(prefix + path), e["msg"], "schema"))
        return None, out


def layer_for(layers: dict, team_id, team_alias, key_layer) -> "LayerRef | None":
    """Which layer serves a key (docs/teams.md#precedence): its named layer (`aisia_policy`) when
    it has one, else its team's by team id, else by team alias; None: the operator's policy. A
    named layer the policy does not declare is None too (the caller says so: litellm/layering.py)."""
    if key_layer:
        ref = LayerRef("layers", str(key_layer))
        return ref if ref in layers else None
    for name in (team_id, team_alias):
        if name:
            ref = LayerRef("teams", str(name))
            if ref in layers:
                return ref
    return None


def meets_tier(tier, min_tier) -> bool:
    """A deployment of `tier` meets the minimum `min_tier` (None: any; an untiered one meets none)."""
    if min_tier is None:
        return True
    return tier in TIER_ORDER and TIER_ORDER.index(tier) >= TIER_ORDER.index(min_tier)


def narrows(ref, models=(), min_tier=None) -> bool:
    """Whether ``left_out`` can leave any deployment out for a request: a layer decides it, its
    key may use some models only, or it asks for a minimum tier. When none holds (the
    operator's policy, a key of any model, no minimum tier: most requests) it leaves none out,
    and a caller need not build the deployment views it reads."""
    return ref is not None or bool(models) or min_tier is not None


def left_out(alias: str, ref, operator_alias, operator_deps, layer_deps, models=(), min_tier=None) -> dict:
    """id -> why, of the deployments a request may not use (docs/teams.md#narrowing): those the
    operator's selector of the alias does not keep when a layer decides (judged on the operator's
    views, `operator_deps`: a layer's annotations cannot widen), those outside the key's `models`
    (a key given the alias itself and none of its groups may use the alias as a whole), and
    those below the request's minimum tier (judged on the layer's views, `layer_deps`)."""
    out = {}
    models = list(models)
    if models and not any(matches_any(models, (d.model_name,)) for d in operator_deps) \
            and matches_any(models, (alias,)):
        models = []
    tiers = {d.id: d.tier for d in layer_deps}
    for d in operator_deps:
        if ref is not None and operator_alias is not None and not selects(operator_alias.candidates, d):
            out[d.id] = f"not a candidate of the operator's alias {alias!r} (layer {ref.label} only narrows)"
        elif models and not matches_any(models, (d.model_name,)):
            out[d.id] = "not among the models the key may use"
        elif not meets_tier(tiers.get(d.id), min_tier):
            out[d.id] = f"tier {tiers.get(d.id) or 'unknown'} is below the request's minimum tier {min_tier}"
    return out
