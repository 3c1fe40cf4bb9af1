"""Fault injection against a real LiteLLM proxy with the plugin (memory store with a snapshot),
simulated upstreams over HTTP and the real `openai` client: every upstream fault of docs/reliability.md's
failure table, every deployment of an alias down at once, a broken policy file while serving,
and a clean restart keeping what was learned.

Each fault has its own alias over its own two upstreams (`<case>-a`, the cheaper, which the
`cost` strategy tries first, and `<case>-b`), so that what one test breaks cannot change another
test's routing. One proxy serves the module."""

from __future__ import annotations

import os
import time

import openai
import pytest

from fault_helpers import admin_get, chat, client_of, explain_rows, start_plugin_proxy, stats, wait_for
from proxy_harness import deployment, free_port, start_upstreams, stop_upstreams

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy: not in the fast suite, `pytest -m "not proxy"`

BREAKER_TIMEOUT_S = 3.0
UPSTREAM_TIMEOUT_S = 3  # the deployments' own request timeout (LiteLLM's `timeout`)

# case -> (upstream control of <case>-a, the failure kind the plugin must see)
FAULTS = {
    "e500": ({"mode": "error", "status": 500}, "provider"),
    "e502": ({"mode": "error", "status": 502}, "provider"),
    "e503": ({"mode": "error", "status": 503}, "provider"),
    "hang": ({"mode": "timeout"}, "provider"),
    "malformed": ({"mode": "malformed"}, "provider"),
    "cut": ({"mode": "stream_break"}, "provider"),  # a non-streamed body cut midway, connection dropped
    "refused": (None, "provider"),  # nothing listens at <case>-a's address
}
CASES = [*FAULTS, "stream503", "rl", "slow"]
ALLDOWN = ["dn-a", "dn-b", "dn-c"]

POLICY = """\
version: 1
defaults: false
proxy:
  reload_interval_s: 0.5
state:
  snapshot_path: {snapshot}
circuit_breaker:
  failure_threshold: 2
  timeout_s: {breaker_timeout}
  half_open_max_calls: 1
aliases:
{aliases}  f/alldown:
    description: every deployment down
    strategy: cost
    candidates: {{models: [dn-a, dn-b, dn-c]}}
    failover: {{attempts: 2}}
"""


def _aliases() -> str:
    return "".join(f"  f/{c}:\n    description: fault {c}\n    strategy: cost\n"
                   f"    candidates: {{models: [{c}-a, {c}-b]}}\n    failover: {{attempts: 1}}\n" for c in CASES)


@pytest.fixture(scope="module")
def upstreams():
    specs = [{"name": f"{c}-{s}", "input_cost_per_1m": 0.1 if s == "a" else 1.0,
              "output_cost_per_1m": 0.1 if s == "a" else 1.0} for c in CASES for s in "ab" if (c, s) != ("refused", "a")]
    specs += [{"name": n, "input_cost_per_1m": 0.1 * (k + 1), "output_cost_per_1m": 0.1 * (k + 1)}
              for k, n in enumerate(ALLDOWN)]
    running = start_upstreams(specs)
    yield {u.name: u for u in running}
    stop_upstreams(running)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("faults")


@pytest.fixture(scope="module")
def policy_file(work):
    path = work / "team.yaml"
    path.write_text(POLICY.format(snapshot=work / "state.json", breaker_timeout=BREAKER_TIMEOUT_S, aliases=_aliases()))
    return path


@pytest.fixture(scope="module")
def proxy(work, upstreams, policy_file):
    models = [deployment(n, u, litellm_params={"timeout": UPSTREAM_TIMEOUT_S}) for n, u in upstreams.items()]
    models.append(deployment("refused-a", f"http://127.0.0.1:{free_port()}/v1",
                             litellm_params={"timeout": UPSTREAM_TIMEOUT_S}, input_cost_per_token=1e-7,
                             output_cost_per_token=1e-7))
    p = start_plugin_proxy(work / "proxy", upstreams, policy_file, models=models)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def client(proxy):
    return client_of(proxy)


# -- one upstream fault at a time ---------------------------------------------------------------
@pytest.mark.parametrize("case", list(FAULTS))
def test_a_failing_upstream_is_failed_over_and_its_breaker_opens(proxy, client, upstreams, case):
    control, kind = FAULTS[case]
    a = upstreams.get(f"{case}-a")
    if control:
        a.control(**control)
    try:
        for n in (1, 2):  # failure_threshold: 2
            served, headers = chat(client, f"f/{case}")
            assert served == f"{case}-b", f"request {n}: the client must see the other candidate's success"
            rows = explain_rows(proxy, headers["x-aisia-request-id"])
            assert [r["deployment_id"] for r in rows] == [f"{case}-a", f"{case}-b"]
            assert rows[0]["outcome"]["success"] is False
            assert rows[0]["outcome"]["failure"]["kind"] == kind, rows[0]["outcome"]
            assert rows[1]["outcome"]["success"] is True
        row = stats(proxy)[f"{case}-a"]
        assert row["breaker"] == "OPEN" and row["count"] == 2 and row["error_rate"] > 0
        if a is not None:
            assert a.stats()["calls"] == 2  # one call per request: LiteLLM retried elsewhere, not here
    finally:
        if a is not None:
            a.control(mode="ok")


def test_a_stream_whose_upstream_fails_before_the_first_chunk_is_failed_over(proxy, client, upstreams):
    upstreams["stream503-a"].control(mode="error", status=503)
    try:
        raw = client.chat.completions.with_raw_response.create(
            model="f/stream503", messages=[{"role": "user", "content": "hello"}], stream=True)
        text = "".join(ch.choices[0].delta.content or "" for ch in raw.parse() if ch.choices)
    finally:
        upstreams["stream503-a"].control(mode="ok")
    assert "served-by=stream503-b" in text
    rows = explain_rows(proxy, raw.headers["x-aisia-request-id"])
    assert [r["deployment_id"] for r in rows] == ["stream503-a", "stream503-b"]
    assert rows[0]["outcome"]["failure"]["kind"] == "provider"


def test_a_429_with_retry_after_backs_off_without_opening_the_breaker(proxy, client, upstreams):
    a = upstreams["rl-a"]
    a.control(mode="rate_limit", retry_after=60)
    try:
        served, headers = chat(client, "f/rl")
        assert served == "rl-b"
        rows = explain_rows(proxy, headers["x-aisia-request-id"])
        assert rows[0]["outcome"]["failure"]["kind"] == "rate_limit"
        assert [chat(client, "f/rl")[0] for _ in range(3)] == ["rl-b"] * 3
        assert a.stats()["calls"] == 1  # Retry-After honoured: not asked again meanwhile
    finally:
        a.control(mode="ok")
    row = stats(proxy)["rl-a"]
    assert row["breaker"] == "CLOSED" and row["count"] == 0  # neither an outage nor a quality signal


def test_a_slow_upstream_within_its_timeout_serves_and_its_latency_is_learned(proxy, client, upstreams):
    a = upstreams["slow-a"]
    a.control(mode="slow", latency_ms=1200)
    try:
        started = time.monotonic()
        served, headers = chat(client, "f/slow")
        elapsed = time.monotonic() - started
    finally:
        a.control(mode="ok")
    assert served == "slow-a" and elapsed >= 1.2  # slow is not a failure: no failover
    rows = explain_rows(proxy, headers["x-aisia-request-id"])
    assert len(rows) == 1 and rows[0]["outcome"]["success"] is True
    assert rows[0]["outcome"]["latency_s"] >= 1.2
    row = stats(proxy)["slow-a"]
    assert row["breaker"] == "CLOSED" and row["avg_latency"] >= 1.2
    assert upstreams["slow-b"].stats()["calls"] == 0


# -- every deployment of an alias down ----------------------------------------------------------
def test_every_deployment_down_gives_one_clear_503_without_a_retry_storm_then_recovers(proxy, client, upstreams):
    ups = [upstreams[n] for n in ALLDOWN]
    for u in ups:
        u.control(mode="error", status=500)
    try:
        # Until the breakers open: each request tries every candidate once (attempts 2 = 3 tries).
        for n in (1, 2):
            with pytest.raises(openai.APIStatusError) as err:
                chat(client, "f/alldown")
            assert err.value.status_code == 502, err.value
            text = str(err.value)
            assert "f/alldown" in text and all(d in text for d in ALLDOWN), text
            assert [u.stats()["calls"] for u in ups] == [n] * 3
        assert all(stats(proxy)[d]["breaker"] == "OPEN" for d in ALLDOWN)
        # Every breaker open: one clear 503 naming the alias, and (almost) no upstream call. Each
        # deployment may be probed once per breaker timeout (half_open_max_calls: 1).
        started = time.monotonic()
        statuses = []
        for _ in range(20):
            with pytest.raises(openai.APIStatusError) as err:
                chat(client, "f/alldown")
            statuses.append(err.value.status_code)
            assert "f/alldown" in str(err.value)
        elapsed = time.monotonic() - started
        probes = sum(u.stats()["calls"] for u in ups) - 6
        windows = int(elapsed // BREAKER_TIMEOUT_S) + 1
        assert probes <= windows * len(ups), (probes, elapsed)
        assert statuses.count(503) >= 20 - probes, statuses  # a probe that fails is a 502 of that request
        assert set(statuses) <= {502, 503}
    finally:
        for u in ups:
            u.control(mode="ok")
    # Back: after the breaker timeout a half-open probe is let through, succeeds and closes it.
    first = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            first = chat(client, "f/alldown")
            break
        except openai.APIStatusError:
            time.sleep(0.3)
    assert first is not None, "the alias never recovered"
    served, headers = first
    rows = explain_rows(proxy, headers["x-aisia-request-id"])
    assert rows[-1]["probe"] is True and rows[-1]["outcome"]["success"] is True, (rows, stats(proxy))
    assert stats(proxy)[served]["breaker"] == "CLOSED"
    assert chat(client, "f/alldown")[0] == served


# -- the policy file broken while serving -------------------------------------------------------
BOMB = "".join(f"{k}: &{k} [" + ", ".join([f"*{p}"] * 9 if p else ['"lol"'] * 9) + "]\n"
               for k, p in zip("abcdefghi", [None, *"abcdefgh"]))


def _breakages(path):
    def garbage():
        path.write_text("version: 1\naliases:\n  f/e500: {strategy: cost\n  ]]] not: [yaml\n")

    def empty():
        path.write_text("")

    def deleted():
        path.unlink()

    def unreadable():
        if os.geteuid() != 0:
            path.chmod(0)
        else:  # root reads whatever the permission bits say: a FIFO in its place cannot be read either
            fifo = path.with_suffix(".fifo")
            os.mkfifo(fifo)
            os.replace(fifo, path)

    def binary():
        path.write_bytes(b"version: 1\n\xff\xfe\x00\x00garbage \x00\x9c\n")

    def bomb():
        path.write_text("version: 1\n" + BOMB)

    return {"garbage": garbage, "empty": empty, "deleted": deleted, "unreadable": unreadable, "binary": binary,
            "bomb": bomb}


def test_a_broken_policy_file_keeps_the_last_good_policy_and_is_reported_once(proxy, client, policy_file):
    good = policy_file.read_text()
    before = chat(client, "f/e500")[0]
    for name, breaks in _breakages(policy_file).items():
        checks = admin_get(proxy, "/aisia/policy")["checks"]
        breaks()
        state = wait_for(lambda: (lambda s: s if s["rejected_edit"] and s["checks"] > checks else None)(
            admin_get(proxy, "/aisia/policy")), f"the {name} policy's rejection", limit_s=60,
            detail=lambda: admin_get(proxy, "/aisia/policy"))
        error = state["rejected_edit"]
        assert str(policy_file) in error, (name, error)
        first = error.splitlines()[0]
        assert first.startswith(f"{policy_file}:"), (name, error)
        if name in ("garbage", "binary", "bomb"):
            line = int(first.split(":")[1])
            assert line >= 1, (name, error)  # located at a line of the file
        # Still serving the last good policy.
        assert chat(client, "f/e500")[0] == before, name
        assert "f/alldown" in admin_get(proxy, "/aisia/policy")["aliases"]
        checks = state["checks"]
        wait_for(lambda: admin_get(proxy, "/aisia/policy")["checks"] >= checks + 2, "more checks of the broken file")
        assert proxy.logs().count(first) == 1, (name, first)  # logged once, not once per check
        fresh = policy_file.with_suffix(".new")
        fresh.write_text(good)
        os.replace(fresh, policy_file)  # one step: the watcher never sees a half-restored file
        wait_for(lambda: admin_get(proxy, "/aisia/policy")["rejected_edit"] is None, f"the good policy after {name}",
                 detail=lambda: admin_get(proxy, "/aisia/policy"))
    assert chat(client, "f/e500")[0] == before


# -- a clean restart keeps what was learned (state.snapshot_path) ---------------------------------
def test_a_clean_restart_keeps_the_learned_state_through_the_snapshot(proxy, client, work):
    for _ in range(3):
        chat(client, "f/slow")
    # The last outcomes are learned after their responses (LiteLLM's success callbacks).
    wait_for(lambda: stats(proxy).get("slow-a", {}).get("count", 0) >= 3, "the three outcomes of slow-a learned",
             detail=lambda: stats(proxy))
    before = stats(proxy)
    assert before["slow-a"]["count"] >= 3
    proxy.restart()
    assert (work / "state.json").exists(), "no snapshot was written on the clean shutdown"
    after = stats(proxy)
    for dep, row in before.items():
        assert after[dep]["count"] == row["count"], dep
        assert after[dep]["breaker"] == row["breaker"], dep
        assert after[dep]["mean_reward"] == pytest.approx(row["mean_reward"], abs=1e-9), dep
