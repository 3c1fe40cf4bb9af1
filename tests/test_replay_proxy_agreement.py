"""Issue 35, acceptance 3: the replay and the proxy classify the same failure log identically.

The proxy's side is the plugin's own hooks inside a real ``litellm.Router`` (in this process) in
front of three simulated upstreams behind three providers: a scripted series of requests meets
provider failures, inputs that crash every upstream, a rate limit, a request LiteLLM refuses on
every deployment and a stream LiteLLM's repeated-chunk guard stops. What the proxy judged is
recorded as a failure log (each attempt: its deployment and, for a failure, the status, class,
message and time it took, as ``blame.judge`` received them) with the verdict it learned (the
explain log). The same log is then fed to the replay's judge (``replay.runner.RequestJudge``,
what ``run_router`` learns through, with the error class a trace holds: one name) and every
attempt's verdict, and the failures each breaker counted, must be the same."""

from __future__ import annotations

import asyncio
import random

from router_harness import PluginRouters

from aisia_plugin import blame
from aisia_plugin.engine import Engine
from aisia_plugin.outcome import Outcome
from aisia_plugin.policy.loader import load_policy_with_locations
from aisia_plugin.replay.runner import RequestJudge
import hostile_tenant
from proxy_harness import upstreams_fixture

ALIAS = hostile_tenant.ALIAS
NAMES = hostile_tenant.NAMES
PROVIDERS = hostile_tenant.PROVIDERS
POLICY = hostile_tenant.policy(failure_threshold=1000)  # no breaker opens: every request starts alike
upstreams = upstreams_fixture(hostile_tenant.upstream_specs())


def text(prompt: str) -> list:
    return [{"role": "user", "content": prompt}]


# (what the cheapest upstream does meanwhile, the request): each is one entry of the log
SCRIPT = [
    (None, {"messages": text("Hello there")}),
    ({"mode": "error", "status": 503}, {"messages": text("Hello again")}),
    ({"mode": "error", "status": 500}, {"messages": text("And again")}),
    ({"mode": "drop"}, {"messages": text("Once more")}),
    ({"mode": "rate_limit", "retry_after": 0.2}, {"messages": text("Still here")}),
    (None, {"messages": text("AISIA-FAULT=error crash every upstream")}),
    (None, {"messages": text("AISIA-FAULT=drop crash every upstream")}),
    (None, {"messages": [{"role": "user", "content": [{"type": "weird"}]}]}),  # LiteLLM refuses it everywhere
    (None, {"messages": text("AISIA-FAULT=repeat say again"), "stream": True}),
    (None, {"messages": text("Goodbye")}),
]


def run_proxy_side(routers, upstreams, monkeypatch):
    """The script through the plugin in a Router: (the log: per request, its attempts in order,
    each (deployment, AttemptFailure or None for a success, the verdict learned as (fault,
    reason, kind) or None), the plugin)."""
    monkeypatch.setenv("AISIA_SYNC_AFTER", "1")  # each outcome learned where the hook reports it
    router, plugin = routers.make(hostile_tenant.models(upstreams), num_retries=2)
    judged: list = []  # per request of the script: {(deployment, earlier failures): AttemptFailure}
    real = blame.judge

    def recording(cfg, failure, request=blame.NO_FACTS, earlier=(), alias=""):
        judged[-1][(failure.deployment_id, len(earlier))] = failure
        return real(cfg, failure, request, earlier, alias)

    monkeypatch.setattr(blame, "judge", recording)

    async def script():
        for control, request in SCRIPT:
            judged.append({})
            if control:
                upstreams[NAMES[0]].control(**control)
            try:
                reply = await router.acompletion(model=ALIAS, **request)
                if request.get("stream"):
                    async for _ in reply:
                        pass
            except Exception:  # noqa: BLE001 - a failed request is part of the log
                pass
            finally:
                upstreams[NAMES[0]].control(mode="ok")
            # LiteLLM logs a success in the background: wait (bounded) until every attempt is learned.
            for _ in range(200):
                if all(e["outcome"] is not None for e in plugin.runtime.explain if e["served_by"]):
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.25)  # the rate limit's Retry-After: every request starts from the same state

    asyncio.run(script())
    monkeypatch.setattr(blame, "judge", real)
    log = []
    by_request: dict = {}
    for e in plugin.runtime.explain:
        if e["served_by"]:
            by_request.setdefault(e["request_id"], []).append(e)
    for entries, failures in zip(by_request.values(), judged):
        attempts = []
        for k, e in enumerate(sorted(entries, key=lambda e: e["attempt"])):
            out = e["outcome"]
            failure = None if out is None or out.get("success") else failures[(e["served_by"], k)]
            verdict = None if out is None or out.get("success") else \
                (out["failure"]["fault"], out["failure"]["reason"], out["failure"]["kind"])
            attempts.append((e["served_by"], failure, verdict))
        log.append(attempts)
    return log, plugin


def replay_side(log):
    """The same log through the replay's judge: per request {deployment: verdict}, and the engine."""
    policy = load_policy_with_locations([_policy_path]).policy
    engine = Engine(policy, clock=lambda: 1000.0, rng=random.Random(0))
    out = []
    for attempts in log:
        judge = RequestJudge(engine, ALIAS, PROVIDERS)
        for dep, failure, _ in attempts:
            if failure is None:
                judge.outcome(ALIAS, Outcome(dep, True, latency_s=0.05))
                continue
            names = failure.error_type if isinstance(failure.error_type, (list, tuple)) else [failure.error_type]
            judge.outcome(ALIAS, Outcome(dep, False, latency_s=failure.elapsed_s, status_code=failure.status_code,
                                         error_type=names[0] if names else None, message=failure.message))
        judge.settle()
        out.append({dep: (v.fault, v.reason, v.kind.value) if v is not None else None for dep, v in judge.verdicts})
    return out, engine


_policy_path = None


def test_the_replay_and_the_proxy_classify_the_same_failure_log_identically(tmp_path, upstreams, monkeypatch):
    global _policy_path
    _policy_path = tmp_path / "policy.yaml"
    _policy_path.write_text(POLICY)
    routers = PluginRouters([_policy_path])
    try:
        log, plugin = run_proxy_side(routers, upstreams, monkeypatch)
    finally:
        routers.close()
    proxy = [{dep: verdict for dep, _, verdict in attempts} for attempts in log]
    replayed, engine = replay_side(log)
    assert len(log) == len(SCRIPT)
    print("\nper request, deployment -> (fault, reason, kind):", *proxy, sep="\n  ")
    assert replayed == proxy
    counted = {n: plugin.runtime.store.breaker(n).failures for n in NAMES}
    assert {n: engine.store.breaker(n).failures for n in NAMES} == counted
    # The log holds every kind of verdict the script was written for (a check that can fail).
    reasons = {v[1] for request in proxy for v in request.values() if v is not None}
    assert reasons >= {"provider_error", "rate_limited", "failed_on_another_provider", "litellm_guard"}, proxy
    assert counted[NAMES[0]] == 3 and counted[NAMES[1]] == counted[NAMES[2]] == 0, counted
