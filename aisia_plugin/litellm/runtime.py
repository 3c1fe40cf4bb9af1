"""What the plugin holds between requests: the policy and its engine, the state store, the
deployments as the core sees them, the calls in flight, the served requests awaiting feedback
and the recent decisions. Nothing here awaits I/O except the store's own async methods."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import OrderedDict, deque
from dataclasses import replace
from typing import Any, Mapping, Optional

from ..answer_time import TokenTimes
from ..blame import PROVIDER, OutlierRule, key_outlier, outlier_verdict
from ..decision import Decision, Deployment, learned_domain
from ..deployments import build_deployment
from ..engine import Engine
from ..policy.loader import LoadedPolicy
from ..policy.models import Policy
from ..state import open_store
from . import compat
from .conversations import Conversations
from .costs import litellm_price, with_context_window
from .events import session_of
from .layering import Scopes
from .tenancy import session_key
from .lifecycle import Call, ServedAnswer

log = logging.getLogger("aisia_plugin.litellm")

# Bounds on what is kept per request: a proxy serves for months, and nothing here may grow with
# the traffic. A call's record lives until its last event (a stream's arrives when it ends).
MAX_CALLS = 20000
CALL_TTL_S = 1800.0
SERVED_TTL_S = 86400.0  # how long a served request awaits feedback (the store bounds their number)
MAX_HEADER_CHARS = 240


# $AISIA_SYNC_AFTER=1: the reference path, every step of AfterResponse run where it is queued.
SYNC_AFTER_ENV = "AISIA_SYNC_AFTER"


class AfterResponse:
    """The steps a request's hooks hand over to be run after them, in the order handed over:
    learning an outcome, and what is logged and exported of a decision or an outcome. Queued on
    the request path (a tuple appended), run together by one callback the event loop calls as
    soon as the hook has returned (``loop.call_soon``): before any other task on the loop takes
    its next step, so nothing learned is missing from the next decision. ``synchronous`` (the
    reference path, $AISIA_SYNC_AFTER) runs each step where it is handed over; so does a call
    outside an event loop. A step that raises is logged and the others still run (observing and
    learning never break serving)."""

    def __init__(self, synchronous: Optional[bool] = None):
        if synchronous is None:
            synchronous = os.environ.get(SYNC_AFTER_ENV, "").strip().lower() in ("1", "true", "yes", "on")
        self.synchronous = synchronous
        self._steps: deque = deque()
        self._scheduled = False
        self.ran = 0  # steps run so far

    def __call__(self, step, *args) -> None:
        if self.synchronous:
            self.ran += 1
            step(*args)
            return
        self._steps.append((step, args))
        if not self._scheduled:
            try:
                asyncio.get_running_loop().call_soon(self.run)
            except RuntimeError:  # no event loop (a tool, a test calling the hooks itself): now
                self.run()
                return
            self._scheduled = True

    def run(self) -> None:
        self._scheduled = False
        steps = self._steps
        while steps:
            step, args = steps.popleft()
            self.ran += 1
            try:
                step(*args)
            except Exception:
                log.exception("aisia: a step run after the hooks failed")

    @property
    def pending(self) -> int:
        return len(self._steps)


def one_line(text: str, limit: int = MAX_HEADER_CHARS) -> str:
    """A header value: one line of printable ASCII (HTTP headers are latin-1, and a reason may
    quote a non-ASCII deployment name). Runs of whitespace become one space, the ends are
    stripped, anything else non-ASCII becomes '?'."""
    flat = " ".join(str(text).split())
    flat = flat.encode("ascii", "replace").decode("ascii")
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def proxy_workers() -> int:
    """How many worker processes the proxy runs (LiteLLM's CLI sets $NUM_WORKERS from
    --num_workers)."""
    try:
        return max(1, int(os.environ.get("NUM_WORKERS") or 1))
    except ValueError:
        return 1


class Runtime:
    def __init__(self, loaded: LoadedPolicy, store=None):
        self.loaded = loaded
        self.policy: Policy = loaded.policy
        self.store = store if store is not None else open_store(self.policy)
        # Each deployment's times per output and prompt token (answer_time.py): one for every engine (the
        # teams' layers', a reload's), as the arms it adjusts are the store's.
        self.token_times = TokenTimes()
        self.engine = self.new_engine(self.policy)
        self.attach_priors(None)
        self._deployments: dict[str, tuple[Any, Any, Deployment]] = {}
        self._names: dict[str, tuple] = {}
        self._providers: dict[str, str] = {}  # deployment id -> its provider (what blame calls "another provider")
        # The peers' check before a failure counts (blame.outlier_verdict): its numbers; each
        # deployment's recent calls by key are the store's (shared by the replicas of a Redis store).
        self.outlier = OutlierRule.of(self.policy.circuit_breaker)
        self._unpriced_said: set[tuple[str, str]] = set()
        self._spared_said = False  # LiteLLM's cooldown spared a failure: logged once
        self.calls: "OrderedDict[str, Call]" = OrderedDict()
        self.explain: deque = deque(maxlen=self.policy.proxy.explain_history)
        self.after = AfterResponse()  # learning, logging and metrics, run after the hooks
        self.conversations = Conversations(self)  # conversation signals, in the background
        self.scopes = Scopes(self)  # the teams' and the keys' layers: an engine each (layering.py)

    def new_engine(self, policy: Policy) -> Engine:
        """An engine for `policy` over this store (what was learned is kept). Compiling its
        patterns takes a while: a reload builds it in a thread."""
        return Engine(policy, clock=self.store.clock, store=self.store, token_times=self.token_times)

    def attach_priors(self, previous: Optional[Engine]) -> None:
        """Show the operator's engine's priors in the store's stats (a layer's engine never
        replaces them), knowing the deployments the `previous` engine had met: after a reload the
        stats showed every deployment at the untiered prior until traffic passed again (found
        by a review)."""
        if not hasattr(self.store, "quality_prior"):
            return
        if previous is not None and previous is not self.engine:
            self.engine.quality.know(previous.quality.known())
        self.store.quality_prior = self.engine.quality

    def swap(self, loaded: LoadedPolicy, engine: Optional[Engine] = None) -> None:
        """Serve another policy."""
        self.loaded = loaded
        self.policy = loaded.policy
        previous = self.engine
        self.engine = engine if engine is not None else self.new_engine(self.policy)
        self.attach_priors(previous)
        # The new engine reads the estimates and prompt weights learned before (the store's), so it
        # weighs each key against the same recent evidence: with an empty window, a key held to its
        # bound was alone again after every reload (key_share.py).
        self.engine.key_pulls = previous.key_pulls
        self.scopes.clear()
        self.outlier = OutlierRule.of(self.policy.circuit_breaker)
        self._deployments.clear()
        if self.explain.maxlen != self.policy.proxy.explain_history:
            self.explain = deque(self.explain, maxlen=self.policy.proxy.explain_history)

    # -- deployments ---------------------------------------------------------------------------
    def deployments(self, raws) -> list[Deployment]:
        """The core's view of each LiteLLM deployment dict, in order, each built once. The dicts
        the Router hands the filter are fresh per request (a routing group copies
        ``litellm_params`` to set its ``order``), but ``model_info`` stays the Router's object:
        the cache is keyed on it, checked against the model called (an edited deployment gets
        a new ``model_info``). The same Deployment objects request after request also let the
        engine memoise the alias's pool. The filter hands an alias attempt the alias's whole
        candidate list: the cache's test is made here, in the loop (a hit, the usual case, costs
        no call)."""
        table, out = self._deployments, []
        add = out.append
        for raw in raws:
            info = raw.get("model_info") or {}
            params = raw.get("litellm_params") or {}
            key = str(info.get("id") or raw.get("model_name") or "")
            hit = table.get(key)
            if hit is not None and hit[0] is info and hit[1] == params.get("model"):
                add(hit[2])
            else:
                add(self._built(raw, key, info, params.get("model")))
        return out

    def deployment(self, raw: Mapping) -> Deployment:
        """The core's view of one LiteLLM deployment dict (``deployments``)."""
        return self.deployments((raw,))[0]

    def _built(self, raw: Mapping, key: str, info, model) -> Deployment:
        if len(self._deployments) > 4096:
            self._deployments.clear()
        dep = with_context_window(build_deployment(raw, self.policy, litellm_price), raw)
        self._deployments[key] = (info, model, dep)
        self._names[dep.id] = (dep.id, dep.model_name, dep.model)
        self._providers[dep.id] = dep.provider
        if dep.priced_by_litellm is False and dep.price_basis in ("table", "default") \
                and (dep.id, dep.model) not in self._unpriced_said:
            # Never a guessed price in silence: once per deployment and model, not per reload.
            self._unpriced_said.add((dep.id, dep.model))
            log.warning("aisia: LiteLLM has no price for deployment %s (%s): it bills its requests None; the "
                        "router ranks and budgets it at $%g/$%g per 1M tokens in/out from %s", dep.id, dep.model,
                        dep.input_cost_per_1m, dep.output_cost_per_1m, dep.price_source.split(" (")[0])
        return dep

    def counted_cost(self, outcome):
        """The outcome with the cost the router counts (``Deployment.counted_usd``: an unpriced
        model's calls at the price the router ranked and budgeted it at, the policy's table, said
        once at start, from the tokens LiteLLM reports)."""
        hit = self._deployments.get(outcome.deployment_id)
        if hit is None:
            return outcome
        cost = hit[2].counted_usd(outcome.cost_usd, outcome.input_tokens, outcome.output_tokens)
        return outcome if cost is outcome.cost_usd else replace(outcome, cost_usd=cost)

    def known(self, deployment_id: Optional[str]) -> Optional[Deployment]:
        """The core's view of a deployment a decision met, by id; None for one never met."""
        hit = self._deployments.get(deployment_id or "")
        return hit[2] if hit is not None else None

    def deployment_names(self, deployment_id: Optional[str]) -> tuple:
        """The names a deployment's errors may quote (id, model group, model)."""
        return self._names.get(deployment_id or "", (deployment_id,))

    def reset(self, deployment_id: str) -> None:
        """Forget what was learned of a deployment (an operator knows it is fixed): its arms,
        quality evidence and breaker in the store, its recent calls and the keys' recent evidence
        here (the keys' pulls were read against the evidence just forgotten), and its time per token."""
        self.store.reset(deployment_id)
        self.store.forget_peer_calls(deployment_id)
        self.engine.key_pulls.forget(deployment_id)
        self.token_times.forget(deployment_id)

    def deployment_provider(self, deployment_id: Optional[str]) -> str:
        """The deployment's provider ('' when unknown): two failures of one request on two
        providers make it the request's (blame.judge)."""
        return self._providers.get(deployment_id or "", "")

    def weighed(self, key: Optional[str], outcome, verdict):
        """An attempt's verdict once weighed against the other keys' recent calls to its
        deployment (blame.outlier_verdict: a key failing where the others are served does not
        count); the call is then noted among the deployment's recent calls when it is evidence of
        its health (a success, or a failure that counts)."""
        if outcome.success or (verdict is not None and verdict.counts):
            store, rule, now = self.store, self.outlier, self.store.clock()
            if not outcome.success:
                verdict = outlier_verdict(verdict, store.peer_calls(outcome.deployment_id, key, now, rule), rule)
            store.note_peer_call(outcome.deployment_id, key, outcome.success, now, rule)
        return verdict

    def spares_cooldown(self, call: Call) -> bool:
        """Whether LiteLLM's cooldown is to be spared the call's latest failed attempt: it is not the
        provider's (blame.judge: the caller's, or LiteLLM's own refusal or guard), or it counts yet
        the other keys' calls to its deployment show it is this key's (blame.key_outlier). A failure
        of the provider's, held until the next outcome, reaches LiteLLM as it is
        (docs/failures.md#litellms-own-cooldown)."""
        failure = call.failures[-1] if call.failures else None
        if failure is None or failure.verdict is None:
            return False
        if failure.verdict.fault != PROVIDER:
            return True
        return failure.verdict.counts and key_outlier(
            self.store.peer_calls(failure.deployment_id, call.key, self.store.clock(), self.outlier), self.outlier)

    def tell_cooldown(self, call: Call, raw, exception=None) -> None:
        """Tell LiteLLM's cooldown, before its failure callback runs, whether to see the call's
        latest failed attempt (``spares_cooldown``); `raw` is the per-attempt hook's request or the
        failure event's kwargs (whose own exception is the live one)."""
        live = exception if exception is not None else raw.get("exception")
        sees = not self.spares_cooldown(call)
        if compat.litellm_cooldown_sees(raw, live, sees) and not sees and not self._spared_said:
            self._spared_said = True  # said once: never a setting changed in silence
            log.info("aisia: LiteLLM's cooldown is spared the failures of alias requests the plugin does not hold "
                     "against a deployment (the attempt's cooldown_time 0; docs/failures.md#litellms-own-cooldown)")

    # -- calls ---------------------------------------------------------------------------------
    def session(self, ap, data: Mapping, user_api_key_dict) -> Optional[str]:
        """The conversation an ``lkgp`` alias keeps on its last good deployment, hashed
        (``events.session_of`` says where it is read); None for any other strategy."""
        if ap.strategy != "lkgp":
            return None
        value = session_of(data, self.policy.proxy.session_header, user_api_key_dict)
        return session_key(str(value)) if value else None

    def open_call(self, request_id: str, alias: str, session: Optional[str]) -> Call:
        """The request's call for `alias`, opened by the pre-call hook (ROUTING); its conversation
        is read after it (``Conversations.opened``)."""
        now = time.monotonic()
        call = self.calls.get(request_id)
        if call is None or call.alias != alias:
            call = self.calls[request_id] = Call(alias, request_id, session, now)
        self._trim(now)
        return call

    def call(self, request_id: Optional[str]) -> Optional[Call]:
        """The request's first call (the alias the client asked for)."""
        return self.calls.get(request_id) if request_id else None

    def call_for(self, request_id: Optional[str], alias: Optional[str], *, create: bool = False) -> Optional[Call]:
        """The request's call for `alias`: its first, or the branch a fallback opened; with
        `create`, a branch is opened (and a first call when the request has none)."""
        first = self.calls.get(request_id) if request_id else None
        if first is None:
            return self.open_call(request_id, alias, None) if create and request_id and alias else None
        if alias is None or first.alias == alias:
            return first
        branch = first.branches.get(alias)
        if branch is None and create:
            branch = first.branches[alias] = Call(alias, request_id, None, time.monotonic(), key=first.key,
                                                  conversation=first.conversation, tenant=first.tenant,
                                                  limits=first.limits, layer=first.layer, pace=first.pace)
        return branch

    def close_call(self, call: Call) -> None:
        """Forget a request whose last hook has run (the bounds above are for abandoned ones)."""
        if self.calls.get(call.request_id) is not None:
            del self.calls[call.request_id]

    def note_served(self, call: Call, served: ServedAnswer) -> None:
        """Register the request for feedback, against the deployment that answered it (the call's
        ``serve`` transition): kept in the store (every worker of a shared store resolves it),
        with the hash of the key that made it."""
        self.store.note_served(call.request_id, {"alias": call.alias, "deployment_id": served.deployment_id,
                                                 "domain": learned_domain(served.decision), "session": call.session,
                                                 "key": call.key}, SERVED_TTL_S)

    def _trim(self, now: float) -> None:
        """Drop the oldest calls past MAX_CALLS or older than CALL_TTL_S (abandoned requests)."""
        calls = self.calls
        while calls:
            first = next(iter(calls.values()))
            if len(calls) <= MAX_CALLS and now - first.created <= CALL_TTL_S:
                break
            calls.popitem(last=False)

    # -- explanations ----------------------------------------------------------------------------
    def explain_entry(self, call: Call, decision: Decision, attempt: int, excluded: Optional[list] = None) -> dict:
        """The explain log's record of one attempt; the decision's rows are rendered when the log
        is read (``render_explain``), not on the request path. `excluded`: ``call.tried`` as the
        caller read it. The entry lives for the log's length (hundreds of requests): it keeps
        nothing the cyclic collector tracks but itself and the decision (whose explanation is
        atoms: decision.Explainer), the deployments tried as a tuple of strings."""
        entry = {"request_id": call.request_id, "time": time.time(), "attempt": attempt,
                 "excluded": tuple(call.tried if excluded is None else excluded), "decision": decision,
                 "outcome": None, "served_by": None, "layer": call.layer.label if call.layer is not None else None,
                 "team": call.tenant.team if call.tenant is not None else None}  # (whose view shows it: page_view.py)
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
                "refused": d.refused, "excluded_after_failure": list(entry["excluded"]),
                "served_by": entry.get("served_by"), "layer": entry.get("layer"),
                "candidates": [s.as_dict() for s in d.scores], "outcome": entry["outcome"],
            })
        return out
