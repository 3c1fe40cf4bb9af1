"""What the plugin holds between requests: the policy and its engine, the state store, the
deployments as the core sees them, the calls in flight, the served requests awaiting feedback
and the recent decisions. Nothing here awaits I/O except the store's own async methods."""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from ..decision import Decision, Deployment
from ..deployments import build_deployment
from ..engine import Engine
from ..policy.loader import LoadedPolicy
from ..policy.models import Policy
from ..state import open_store
from .costs import cost_lookup

# Bounds on what is kept per request: a proxy serves for months, and nothing here may grow with
# the traffic. A call's record lives until its last event (a stream's arrives when it ends).
MAX_CALLS = 20000
CALL_TTL_S = 1800.0
MAX_SERVED = 50000
SERVED_TTL_S = 86400.0
MAX_HEADER_CHARS = 240


@dataclass(slots=True)
class Call:
    """One client request for an alias, across its attempts."""

    alias: str
    request_id: str
    session: Optional[str]
    created: float
    decisions: list = field(default_factory=list)  # one Decision per attempt, in order
    tried: list = field(default_factory=list)  # the deployment ids of those attempts
    failures: list = field(default_factory=list)  # (deployment id, FailureKind or None, "500 InternalServerError")
    recorded: set = field(default_factory=set)  # attempts whose outcome was learned (by index)
    explained: list = field(default_factory=list)  # the explain log's entry of each attempt
    served: bool = False  # registered for feedback
    answered: bool = False  # the response headers were produced
    finished: bool = False  # the final outcome was learned

    def attempt_of(self, deployment_id: Optional[str]) -> Optional[int]:
        """The latest attempt on this deployment whose outcome is not yet learned."""
        for k in range(len(self.tried) - 1, -1, -1):
            if self.tried[k] == deployment_id and k not in self.recorded:
                return k
        return None


@dataclass(frozen=True, slots=True)
class Served:
    """A request an alias served: where explicit feedback for it goes."""

    alias: str
    deployment_id: str
    domain: Optional[str]
    session: Optional[str]
    at: float


def one_line(text: str, limit: int = MAX_HEADER_CHARS) -> str:
    """A header value: one line of printable ASCII (HTTP headers are latin-1, and a reason may
    quote a non-ASCII deployment name). Runs of whitespace become one space, the ends are
    stripped, anything else non-ASCII becomes '?'; ``_one_line`` is the plain reading."""
    if type(text) is str and len(text) <= limit and text.isascii() and text.isprintable() \
            and "  " not in text and text[:1] != " " and text[-1:] != " ":
        # Already one clean line (the common case: names from the policy, the engine's reason):
        # printable ASCII's only whitespace is the space, so splitting and joining is a no-op.
        return text
    return _one_line(text, limit)


def _one_line(text: str, limit: int = MAX_HEADER_CHARS) -> str:
    flat = " ".join(str(text).split())
    flat = flat.encode("ascii", "replace").decode("ascii")
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def session_key(value: str) -> str:
    """A session as stored: hashed, so that an API key used as the session never sits in the
    store or the explain log."""
    return hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()[:20]


class Runtime:
    def __init__(self, loaded: LoadedPolicy, store=None):
        self.loaded = loaded
        self.policy: Policy = loaded.policy
        self.store = store if store is not None else open_store(self.policy)
        self.engine = Engine(self.policy, clock=self.store.clock, store=self.store)
        self._deployments: dict[str, tuple[Any, Any, Deployment]] = {}
        self.calls: "OrderedDict[str, Call]" = OrderedDict()
        self.served: "OrderedDict[str, Served]" = OrderedDict()
        self.explain: deque = deque(maxlen=self.policy.proxy.explain_history)

    def new_engine(self, policy: Policy) -> Engine:
        """An engine for `policy` over this store (what was learned is kept). Compiling its
        patterns takes a while: a reload builds it in a thread."""
        return Engine(policy, clock=self.store.clock, store=self.store)

    def swap(self, loaded: LoadedPolicy, engine: Optional[Engine] = None) -> None:
        """Serve another policy."""
        self.loaded = loaded
        self.policy = loaded.policy
        self.engine = engine if engine is not None else self.new_engine(self.policy)
        self._deployments.clear()
        if self.explain.maxlen != self.policy.proxy.explain_history:
            self.explain = deque(self.explain, maxlen=self.policy.proxy.explain_history)

    # -- deployments ---------------------------------------------------------------------------
    def deployment(self, raw: Mapping) -> Deployment:
        """The core's view of one LiteLLM deployment dict, built once per deployment. The dicts
        the Router hands the filter are fresh per request (a routing group copies
        ``litellm_params`` to set its ``order``), but ``model_info`` stays the Router's object:
        the cache is keyed on it, checked against the model called (an edited deployment gets
        a new ``model_info``). The same Deployment objects request after request also let the
        engine memoise the alias's pool."""
        info = raw.get("model_info") or {}
        params = raw.get("litellm_params") or {}
        key = str(info.get("id") or raw.get("model_name") or "")
        hit = self._deployments.get(key)
        if hit is not None and hit[0] is info and hit[1] == params.get("model"):
            return hit[2]
        if len(self._deployments) > 4096:
            self._deployments.clear()
        dep = build_deployment(raw, self.policy, cost_lookup)
        self._deployments[key] = (info, params.get("model"), dep)
        return dep

    def deployments(self, raws) -> list[Deployment]:
        return [self.deployment(r) for r in raws]

    # -- calls ---------------------------------------------------------------------------------
    def open_call(self, call_id: str, alias: str, session: Optional[str]) -> Call:
        now = time.monotonic()
        call = self.calls.get(call_id)
        if call is None or call.alias != alias:
            call = self.calls[call_id] = Call(alias, call_id, session, now)
        self._trim(self.calls, MAX_CALLS, CALL_TTL_S, now, lambda c: c.created)
        return call

    def call(self, call_id: Optional[str]) -> Optional[Call]:
        return self.calls.get(call_id) if call_id else None

    def close_call(self, call: Call) -> None:
        """Forget a call whose last hook has run (the bounds above are for abandoned ones)."""
        if self.calls.get(call.request_id) is call:
            del self.calls[call.request_id]

    def note_served(self, call: Call, decision: Decision) -> None:
        now = time.monotonic()
        call.served = True
        self.served[call.request_id] = Served(call.alias, decision.deployment_id, decision.domain, call.session, now)
        self.served.move_to_end(call.request_id)
        self._trim(self.served, MAX_SERVED, SERVED_TTL_S, now, lambda s: s.at)

    @staticmethod
    def _trim(table: OrderedDict, limit: int, ttl: float, now: float, born) -> None:
        while table:
            first = next(iter(table.values()))
            if len(table) <= limit and now - born(first) <= ttl:
                break
            table.popitem(last=False)

    # -- explanations ----------------------------------------------------------------------------
    def explain_entry(self, call: Call, decision: Decision, attempt: int) -> dict:
        """The explain log's record of one attempt; the decision's rows are rendered when the log
        is read (``render``), not on the request path."""
        entry = {"request_id": call.request_id, "time": time.time(), "attempt": attempt,
                 "excluded": list(call.tried[:attempt]), "decision": decision, "outcome": None}
        self.explain.append(entry)
        return entry

    def render_explain(self, limit: int) -> list[dict]:
        """The latest decisions, newest first: ids, scores, reasons and outcomes; never the prompt."""
        out = []
        for entry in list(self.explain)[::-1][:limit]:
            d: Decision = entry["decision"]
            out.append({
                "request_id": entry["request_id"], "time": entry["time"], "attempt": entry["attempt"],
                "alias": d.alias, "strategy": d.strategy, "domain": d.domain, "task_type": d.task_type,
                "deployment_id": d.deployment_id, "model": d.model, "reason": d.reason, "probe": d.probe,
                "refused": d.refused, "excluded_after_failure": entry["excluded"],
                "candidates": [s.as_dict() for s in d.scores], "outcome": entry["outcome"],
            })
        return out
