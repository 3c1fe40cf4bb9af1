"""What the plugin tells operators: Prometheus metrics (aisia_plugin/metrics.py), the decision
log (aisia_plugin/decision_log.py) and the live routing page (aisia_plugin/ui/), fed from the
callback's hooks. Every method here swallows its own errors: observing must never break serving.

Metrics live in prometheus_client's default registry, so LiteLLM's own ``/metrics`` shows them
when its Prometheus integration is on; ``GET /aisia/metrics`` serves them in any case (in
prometheus_client's multiprocess mode when ``PROMETHEUS_MULTIPROC_DIR`` is set, as with several
LiteLLM workers)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Optional

from ..decision_log import DecisionLog
from ..metrics import RouterMetrics
from ..ui import TeamTimelines, TrafficTimeline

if TYPE_CHECKING:
    from .lifecycle import Call
    from .runtime import Runtime

log = logging.getLogger("aisia_plugin.litellm")

GAUGE_INTERVAL_S = 5.0

_METRICS: Optional[RouterMetrics] = None


def router_metrics() -> RouterMetrics:
    """The process's one set of metrics (prometheus_client refuses a name registered twice)."""
    global _METRICS
    if _METRICS is None:
        _METRICS = RouterMetrics()
    return _METRICS


def metrics_registry():
    """What the metrics are read from: the default registry, or every worker's in
    prometheus_client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``)."""
    from prometheus_client import REGISTRY, CollectorRegistry

    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


def metrics_text(per_deployment: bool = True, team: Optional[str] = None) -> tuple[bytes, str]:
    """The metrics as Prometheus text; without `per_deployment`, without what the router learned
    and chose per deployment (metrics.PER_DEPLOYMENT: the proxy admin's only); for a `team`'s
    key, that team's figures only (metrics.OnlyTeam, docs/teams.md)."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    from ..metrics import PER_DEPLOYMENT, TEAM_FAMILIES, OnlyTeam, WithoutFamilies

    registry = metrics_registry()
    if team is not None and not per_deployment:
        return generate_latest(OnlyTeam(registry, team)), CONTENT_TYPE_LATEST
    hidden = PER_DEPLOYMENT + TEAM_FAMILIES  # (another team's figures: never a tenant's to read)
    return generate_latest(registry if per_deployment else WithoutFamilies(registry, hidden)), \
        CONTENT_TYPE_LATEST


def _model_list() -> list:
    import sys

    proxy_server = sys.modules.get("litellm.proxy.proxy_server")  # outside a proxy: no deployments
    router = getattr(proxy_server, "llm_router", None)
    return list(router.model_list or []) if router is not None else []


class Observer:
    def __init__(self, runtime: "Runtime"):
        self.runtime = runtime
        self.metrics = router_metrics()
        self.decision_log: Optional[DecisionLog] = None
        self.timeline = TrafficTimeline()  # this worker's routed decisions, for the routing page
        self.team_timelines = TeamTimelines()  # each team's, for its view of the page (page_view.py)
        self._log_settings = None
        self.configure()
        store = runtime.store
        if hasattr(store, "on_event"):
            store.on_event = self._store_event

    def configure(self) -> None:
        """Vocabularies and the decision log from the current policy (again after a reload)."""
        try:
            rt = self.runtime
            p = rt.policy
            self.metrics.configure(aliases=p.aliases, domains=p.domains.definitions,
                                   deployments=[d.id for d in self.deployments()],
                                   strategies={a.strategy for a in p.aliases.values()})
            settings = p.logging.decisions
            if settings != self._log_settings:
                if self.decision_log is not None:
                    self.decision_log.close()
                from .runtime import proxy_workers

                # Written off the event loop; each worker of several its own file (decision_log.py).
                self.decision_log = None if settings.path is None else DecisionLog(
                    settings.path, max_bytes=settings.max_bytes, backups=settings.backups,
                    log_prompts=settings.log_prompts, on_error=lambda: self.metrics.store_event("log_error"),
                    background=True, per_process=proxy_workers() > 1, max_queued=settings.max_queued)
                self._log_settings = settings
        except Exception:
            log.exception("aisia: configuring metrics and the decision log failed")

    def deployments(self) -> list:
        """The proxy's deployments as the core sees them (each built once by the runtime)."""
        return self.runtime.deployments(_model_list())

    # -- events ------------------------------------------------------------------------------
    def decided(self, call: "Call", decision, attempt: int, elapsed_s: float, messages=None, tools=None) -> None:
        """A decision's metrics, routing-page point and log line, after the hook (runtime.AfterResponse)."""
        self.runtime.after(self._decided, call.request_id, decision, attempt, elapsed_s, messages, time.time(),
                           call.tenant.team if call.tenant is not None else None, tools)

    def _decided(self, request_id: str, decision, attempt: int, elapsed_s: float, messages, at: float,
                 team: Optional[str] = None, tools=None) -> None:
        try:
            self.metrics.decision(decision, elapsed_s, failover=attempt > 0)
            if decision.deployment_id is not None and not decision.refused:
                self.timeline.add(decision.alias, decision.deployment_id, at)
                self.metrics.team_decision(team, decision)  # (a team's key's only: it tests the team)
                if team:
                    self.team_timelines.add(team, decision.alias, decision.deployment_id, at)
            if self.decision_log is not None:
                prompt = None
                if self.decision_log.log_prompts and messages is not None:
                    from ..features import message_text

                    prompt = message_text(messages)
                # Each candidate's price as the proxy priced it, and the request's features (read
                # again here, after the response: the decision keeps none), for aisia replay --logged.
                prices = {d.id: (d.input_cost_per_1m, d.output_cost_per_1m) for d in self.deployments()}
                features = self.runtime.engine.features(messages, tools) if messages is not None else None
                self.decision_log.decision(request_id, decision, attempt=attempt, prompt=prompt, ts=at, prices=prices,
                                           features=features)
        except Exception:
            log.exception("aisia: recording a decision's metrics failed")

    def evidence(self, request_id: Optional[str], deployment_id: str, *, alias: Optional[str],
                 domain: Optional[str], source: str, value: float, weight: float, kind: Optional[str] = None,
                 language: Optional[str] = None) -> None:
        """Quality evidence recorded about a served answer (``Engine.record_quality``): its
        decision-log line, which ``aisia replay --logged`` values the answer by."""
        try:
            if self.decision_log is not None and request_id:
                self.decision_log.evidence(request_id, deployment_id, alias=alias, domain=domain, source=source,
                                           value=value, weight=weight, kind=kind, language=language)
        except Exception:
            log.exception("aisia: recording quality evidence failed")

    def refused(self, alias: str, reason: str) -> None:
        try:
            self.metrics.refused(alias, reason)
        except Exception:
            log.exception("aisia: recording a refusal failed")

    def learned(self, call: "Call", attempt: int, outcome, reward, kind, at: Optional[float] = None) -> None:
        """An outcome's metrics and log line (run by the step that learned it, after the hooks)."""
        try:
            if outcome.success:
                result = "success"
            else:
                result = {"provider": "provider_failure", "client": "client_error",
                          "rate_limit": "rate_limited"}.get(getattr(kind, "value", ""), "provider_failure")
            self.metrics.outcome(call.alias, outcome.deployment_id, result)
            self.metrics.team_outcome(call.tenant.team if call.tenant is not None else None, call.alias,
                                      outcome.deployment_id, result)  # (a team's key's only: it tests the team)
            if self.decision_log is not None:
                self.decision_log.outcome(call.request_id, outcome.deployment_id, alias=call.alias,
                                          success=outcome.success, status_code=outcome.status_code,
                                          latency_s=outcome.latency_s, cost_usd=outcome.cost_usd, reward=reward,
                                          attempt=attempt, ts=at)
        except Exception:
            log.exception("aisia: recording an outcome's metrics failed")

    def local_first(self, call: "Call", attempt, result: str, conf, escalation: Optional["Call"]) -> None:
        """What became of a local-first call's local answer: its metrics, its explain entry (the
        routing page shows it) and its decision-log line."""
        try:
            parts = None if conf is None else {
                "value": conf.value, "tokens": conf.token_part, "token_count": conf.tokens,
                "learned": conf.learned_part, "defects": list(conf.defects), "defect_factor": conf.defect_factor}
            served = escalation.attempts[-1].deployment_id if escalation is not None and escalation.attempts else None
            attempt.explained["local_first"] = {"result": result, "confidence": parts, "note": call.local_first.note,
                                                "escalation_request_id": getattr(escalation, "request_id", None),
                                                "escalated_to": served}
            self.metrics.local_first_answer(call.alias, result)
            if self.decision_log is not None:
                self.decision_log.local_first(call.request_id, alias=call.alias, deployment_id=attempt.deployment_id,
                                              result=result, confidence=parts, escalated_to=served,
                                              escalation_request_id=getattr(escalation, "request_id", None))
        except Exception:
            log.exception("aisia: recording a local-first answer failed")

    def reloaded(self, result: str) -> None:
        try:
            self.metrics.reload(result)
            if result == "ok":
                self.configure()
        except Exception:
            log.exception("aisia: recording a reload failed")

    def _store_event(self, name: str, n: int) -> None:
        self.metrics.store_event(name, n)

    # -- gauges, refreshed off the request path ----------------------------------------------
    def refresh_gauges(self) -> None:
        try:
            rt = self.runtime
            store, engine = rt.store, rt.engine
            now = engine.clock()
            ids = [d.id for d in self.deployments()]
            self.metrics.configure(aliases=rt.policy.aliases, domains=rt.policy.domains.definitions,
                                   deployments=ids, strategies={a.strategy for a in rt.policy.aliases.values()})
            self.metrics.breakers({dep: engine.breaker.effective_state(store.breaker(dep), now) for dep in ids})
            self.metrics.learned(store.stats())
            self.metrics.pacing(engine.pace_rules, store.pacing())
            depth = getattr(store, "queue_depth", None)
            self.metrics.set_queue_depth(depth() if callable(depth) else 0)
        except Exception:
            log.exception("aisia: refreshing the gauges failed")

    async def run_gauges(self) -> None:
        while True:
            self.refresh_gauges()
            await asyncio.sleep(GAUGE_INTERVAL_S)

    # -- the routing page ----------------------------------------------------------------------
    def _recent(self, team: Optional[str] = None) -> list[dict]:
        """The explain log's entries as the page lists them, oldest first (of `team`'s calls only)."""
        return [{"ts": e["time"], "request_id": e["request_id"], "alias": e["decision"].alias,
                 "deployment": e["decision"].deployment_id, "domain": e["decision"].domain,
                 "strategy": e["decision"].strategy, "team": e.get("team"), "layer": e.get("layer"),
                 "reason": _with_local_first(e.get("local_first"), e["decision"].reason)}
                for e in list(self.runtime.explain) if team is None or e.get("team") == team]

    def _store_name(self) -> str:
        return type(self.runtime.store).__name__.replace("State", "").replace("Store", "").lower() or "memory"

    def snapshot(self) -> dict:
        """The routing page's data for the proxy admin: everything, every team's figures too."""
        from ..metrics import team_figures
        from ..ui import snapshot

        rt = self.runtime
        store, engine = rt.store, rt.engine
        deps = self.deployments()
        return snapshot(now=engine.clock(), aliases=rt.policy.aliases, deployments=deps, stats=store.stats(),
                        breakers={d.id: store.breaker(d.id) for d in deps}, breaker=engine.breaker,
                        recent=self._recent(), store=self._store_name(), timeline=self.timeline,
                        teams=team_figures(metrics_registry()))

    def team_snapshot(self, viewer) -> dict:
        """The routing page's data for a team's key (page_view.Viewer): its own team's only."""
        from ..metrics import team_figures
        from ..ui import team_snapshot
        from .layering import layers_of

        rt = self.runtime
        try:
            ref = rt.scopes.layer_of(viewer.tenant)
        except Exception:  # (a key naming an undeclared layer: its calls are refused, said on each)
            ref = None
        layer = next(({"label": ref.label, **x} for x in layers_of(rt.policy)
                      if ref is not None and (x["section"], x["name"]) == (ref.section, ref.name)), None)
        return team_snapshot(now=rt.engine.clock(), team=viewer.team, layer=layer,
                             aliases=rt.scopes.policy(ref).aliases if ref is not None else rt.policy.aliases,
                             figures=team_figures(metrics_registry(), viewer.team), recent=self._recent(viewer.team),
                             timeline=self.team_timelines.of(viewer.team), store=self._store_name())


def _with_local_first(local_first: Optional[dict], reason: str) -> str:
    """A decision's reason on the routing page, after what became of its local answer."""
    note = (local_first or {}).get("note")
    return f"{note}; {reason}" if note else reason


# -- HTTP routes -------------------------------------------------------------------------------


def mount(app, plugin) -> None:
    """The routing page and its data, all of it for the proxy admin, its own team's view for a
    team's key (page_view.py; signed in with the session cookie, or an Authorization header:
    session.py), and the metrics, authenticated as LiteLLM's own
    /metrics is (admin.metrics_identity), the per-deployment ones for the proxy admin only."""
    from fastapi import Depends
    from fastapi.responses import HTMLResponse, JSONResponse, Response

    from ..ui import page_html
    from . import session
    from .admin import is_admin, jsonable, metrics_identity
    from .page_view import page_viewer
    from .tenancy import tenant_of

    async def page(_=Depends(page_viewer)):
        return HTMLResponse(page_html(), headers={"Cache-Control": "no-store"})

    async def data(viewer=Depends(page_viewer)):
        # The proxy admin reads everything; a team's key its own team's view (page_view.py).
        observer = plugin.observer
        await plugin.runtime.store.prepare()
        shown = observer.snapshot() if viewer.admin else observer.team_snapshot(viewer)
        return JSONResponse(jsonable(shown), headers={"Cache-Control": "no-store"})

    async def metrics(identity=Depends(metrics_identity)):
        # Who may read them follows LiteLLM's /metrics (require_auth_for_metrics_endpoint); what
        # was learned per deployment, the proxy admin only (the check of /admin/bandit/stats).
        plugin.observer.refresh_gauges()
        body, content_type = metrics_text(per_deployment=is_admin(identity), team=tenant_of(identity).team)
        return Response(body, media_type=content_type)

    signed_in = session.page_route(plugin)
    app.router.add_api_route("/aisia/ui", page, methods=["GET"], include_in_schema=False,
                             route_class_override=signed_in)
    app.router.add_api_route("/aisia/ui/data", data, methods=["GET"], include_in_schema=False,
                             route_class_override=signed_in)
    session.mount(app, plugin)
    app.add_api_route("/aisia/metrics", metrics, methods=["GET"], include_in_schema=False)
