"""The policy's aliases as priority ``routing_groups`` of the running LiteLLM Router.

A priority group is callable under its name, is listed by ``/v1/models`` and
``/model_group/info``, and hands ``async_filter_deployments`` the union of its member groups'
healthy deployments with their real ids; it is the only kind of group that may overlap the
user's own groups. Every member gets the same priority: LiteLLM's order filter runs after ours,
and unequal tiers would drop the deployment the plugin chose."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple, Optional

from ..decision import Deployment
from ..deployments import selects
from ..judging import judge_missing, judge_target
from ..policy.errors import PolicyIssue
from ..policy.models import Policy
from ..policy.yamlpos import position_of


class AliasCollision(ValueError):
    """A policy alias has the name of a model the LiteLLM config already serves: the proxy does
    not start (nor take a reload); `aisia validate --deployments` reports the same issues."""

    def __init__(self, issues: list[PolicyIssue]):
        """`issues`: from ``collision_issues``, each located at the alias's definition."""
        self.issues = issues
        super().__init__("\n".join(i.format() for i in issues))


class Conflict(NamedTuple):
    """A setting of the policy the LiteLLM config contradicts: where it is (a path into the
    policy) and what is wrong."""

    path: tuple
    message: str


def collision_issues(collisions: Iterable[Conflict], locations) -> list[PolicyIssue]:
    """The conflicts of a plan as issues located at their settings in the policy files
    (`locations`: the loaded policy's): an alias's definition, the judge's deployment."""
    out = []
    for path, message in collisions:
        pos = position_of(locations, path, key=True) if locations else None
        out.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0, pos.column if pos else 0,
                               ".".join(str(p) for p in path), message, "semantic"))
    return out


JUDGE_FIELD = ("quality", "judge", "deployment")  # a Conflict's path when the judge names no deployment


def _collides(alias: str, what: str) -> Conflict:
    return Conflict(("aliases", alias), f"the alias collides with the LiteLLM {what}; rename the alias")


@dataclass(frozen=True)
class AliasGroups:
    """The members (model names) of each alias, the aliases no deployment serves, the collisions."""

    members: dict[str, list[str]]
    empty: list[str]
    collisions: list[Conflict]  # the aliases' collisions, and a judge that names no deployment


def plan(policy: Policy, deployments: Iterable[Deployment], model_names: Iterable[str],
         model_group_alias: Optional[Mapping] = None, foreign_groups: Iterable[str] = ()) -> AliasGroups:
    """Which model groups each alias routes among: a model name is a member when its alias's
    selector keeps at least one of its deployments (the filter then chooses among deployments)."""
    deps = list(deployments)
    names = set(model_names)
    aliases_of_router = set(model_group_alias or ())
    foreign = set(foreign_groups)
    members, empty, collisions = {}, [], []
    for alias, ap in policy.aliases.items():
        if alias in names:
            collisions.append(_collides(alias, f"model_name {alias!r} of the model_list"))
            continue
        if alias in aliases_of_router:
            collisions.append(_collides(alias, f"router_settings.model_group_alias {alias!r}"))
            continue
        if alias in foreign:
            collisions.append(_collides(alias, f"router_settings.routing_groups entry {alias!r}"))
            continue
        # A wildcard deployment ("auto/*", "*") is a pattern LiteLLM fills in with the name asked
        # for, not a model an alias could send a request to.
        kept = list(dict.fromkeys(d.model_name for d in deps if "*" not in d.model_name and selects(ap.candidates, d)))
        if kept:
            members[alias] = kept
        else:
            empty.append(alias)
    judge = policy.quality.judge.deployment
    if judge is not None and judge_target(judge, deps) is None:
        collisions.append(Conflict(JUDGE_FIELD, judge_missing(judge, deps, policy.aliases)))
    return AliasGroups(members, empty, collisions)


def group_entries(members: Mapping[str, list[str]]) -> list[dict]:
    return [{"group_name": alias, "models": list(models), "routing_strategy": "priority",
             "model_priorities": {m: 1 for m in models}}
            for alias, models in members.items()]


def merged_groups(existing: Iterable[Mapping], ours: Iterable[str], entries: list[dict]) -> list[dict]:
    """The router's groups with ours replaced by `entries` (the user's own groups kept)."""
    mine = set(ours) | {e["group_name"] for e in entries}
    kept = [dict(g) for g in existing if g.get("group_name") not in mine]
    return kept + entries
