"""`aisia stats`: the table and the JSON from a memory snapshot and from Redis, and --reset."""

from __future__ import annotations

import asyncio
import json

from aisia_plugin.breaker import FailureKind
from aisia_plugin.cli import main
from aisia_plugin.engine import Engine
from aisia_plugin.learning import OutcomeRecord
from aisia_plugin.policy import load_policy
from aisia_plugin.quality import QualityRecord
from aisia_plugin.state.memory import MemoryState
from aisia_plugin.state.redis import RedisStore
from redis_server import redis_module  # noqa: F401  (a fixture)

POLICY = load_policy()
RULES = Engine(POLICY, clock=lambda: 0.0).rules


def _learn(store):
    for i in range(8):
        store.record_outcome(OutcomeRecord("gpt-4o", float(i), None, 0.75, 1.5, "auto", "coding"), RULES)
    for i in range(POLICY.circuit_breaker.failure_threshold):
        store.record_outcome(OutcomeRecord("groq-8b", 10.0 + i, FailureKind.PROVIDER, 0.0, 4.0, "auto"), RULES)
    # Quality evidence about gpt-4o's coding answers: two complaints read in conversations, one grade.
    for source, value in (("signal", 0.0), ("signal", 0.0), ("feedback", 1.0)):
        store.record_quality(QualityRecord("gpt-4o", value, 1.0, source, "coding"), RULES)


def test_memory_snapshot_table_json_and_reset(tmp_path, capsys):
    st = MemoryState()
    _learn(st)
    path = tmp_path / "state.json"
    st.save_file(path)
    assert main(["stats", "--state", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["deployment", "domain", "count", "pulls", "mean", "reward", "alpha", "beta", "avg",
                              "latency", "s", "error", "rate", "quality", "prior", "signals", "feedback", "judge",
                              "breaker"]
    rows = {(line.split()[0], line.split()[1]) if not line.startswith(" ") else ("", line.split()[0]): line.split()
            for line in out[2:]}
    assert rows[("gpt-4o", "(all)")][2] == "8" and rows[("gpt-4o", "(all)")][-1] == "CLOSED"
    assert rows[("", "coding")][1] == "8"
    assert rows[("groq-8b", "(all)")][-1] == "OPEN" and rows[("groq-8b", "(all)")][8] == "1.000"  # error rate
    # Quality beside health: the evidence by source (signals, feedback, judge) and its estimate.
    assert rows[("gpt-4o", "(all)")][11:14] == ["2", "1", "0"] and rows[("", "coding")][10:13] == ["2", "1", "0"]
    assert rows[("gpt-4o", "(all)")][9] == "0.333"  # the evidence's mean (a snapshot holds no prior)
    assert rows[("groq-8b", "(all)")][11:14] == ["0", "0", "0"]
    assert main(["stats", "--state", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == json.loads(json.dumps(st.stats()))
    assert {"pulls", "mean_reward", "alpha", "beta", "count", "breaker"} <= set(data["gpt-4o"])
    assert main(["stats", "--state", str(path), "--reset", "groq-8b", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"gpt-4o"}
    assert MemoryState.load_file(path).arm("groq-8b") is None  # the snapshot was rewritten


def test_memory_without_a_snapshot_and_a_bad_file_are_clear_errors(tmp_path, capsys):
    assert main(["stats"]) == 2
    assert "--state" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("[1]")
    assert main(["stats", "--state", str(bad)]) == 2
    assert "bad.json" in capsys.readouterr().err


def test_redis_stats_and_reset(tmp_path, monkeypatch, capsys, redis_module):
    pol_file = tmp_path / "p.yaml"
    pol_file.write_text('state:\n  backend: redis\n  key_prefix: "stats:"\n')
    monkeypatch.setenv("AISIA_POLICY", str(pol_file))
    monkeypatch.setenv("AISIA_REDIS_URL", redis_module.url)
    policy = load_policy()

    async def learn():
        store = RedisStore(policy)
        await store.start()
        _learn(store)
        await store.aclose()

    asyncio.run(learn())
    assert main(["stats", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpt-4o"]["count"] == 8 and data["groq-8b"]["breaker"] == "OPEN"
    assert data["gpt-4o"]["domains"]["coding"]["count"] == 8
    assert main(["stats", "--reset", "groq-8b"]) == 0
    captured = capsys.readouterr()
    assert "groq-8b" not in captured.out and "gpt-4o" in captured.out and "reset groq-8b" in captured.err
    assert not redis_module.client().exists("{stats}:cb:groq-8b", "{stats}:bandit:groq-8b")


def test_redis_unreachable_and_malformed_url(tmp_path, monkeypatch, capsys):
    pol_file = tmp_path / "p.yaml"
    pol_file.write_text("state:\n  backend: redis\n  io_timeout_ms: 200\n")
    monkeypatch.setenv("AISIA_POLICY", str(pol_file))
    from redis_server import free_port

    monkeypatch.setenv("AISIA_REDIS_URL", f"redis://u:topsecret@127.0.0.1:{free_port()}/0")
    assert main(["stats"]) == 1
    err = capsys.readouterr().err
    assert "unreachable" in err and "topsecret" not in err and "u:***@" in err
    monkeypatch.setenv("AISIA_REDIS_URL", "redis://u:topsecret@127.0.0.1:notaport/0")
    assert main(["stats"]) == 2
    err = capsys.readouterr().err
    assert "malformed" in err and "topsecret" not in err


def test_stats_show_each_spend_target_with_its_realised_spend_and_multiplier(tmp_path, monkeypatch, capsys,
                                                                            redis_module):
    pol_file = tmp_path / "p.yaml"
    pol_file.write_text('state:\n  backend: redis\n  key_prefix: "pace:"\n'
                        'aliases:\n  auto: {budget: {target_usd_per_1k_requests: 2}}\n'
                        '  auto/cheap: {budget: {target_usd_per_1k_requests: 0.5, max_multiplier: 20}}\n'
                        '  auto/use: {budget: {target_usd_per_1k_requests: 3, min_multiplier: -10}}\n')
    monkeypatch.setenv("AISIA_POLICY", str(pol_file))
    monkeypatch.setenv("AISIA_REDIS_URL", redis_module.url)
    policy = load_policy()
    rules = Engine(policy, clock=lambda: 0.0).rules

    async def spend():
        store = RedisStore(policy)
        await store.start()
        # $4 then $1 per 1k against $2: the multiplier 1 -> 2 -> 1.5, the spend their mean, $2.5 per 1k
        for i, cost in enumerate((0.004, 0.001)):
            store.record_outcome(OutcomeRecord("gpt-4o", float(i), None, 0.75, 1.5, "auto", pace_alias="auto",
                                               cost_usd=cost), rules)
        await store.aclose()

    asyncio.run(spend())
    # docs/state.md's key: {<prefix>}:pace:<alias>, a hash of the record's fields
    stored = redis_module.client().hgetall("{pace}:pace:auto")
    assert float(stored[b"multiplier"]) == 1.5 and float(stored[b"count"]) == 2.0
    assert main(["stats"]) == 0
    out = capsys.readouterr().out
    lines = out[out.index("spend target"):].splitlines()
    assert lines[0].split() == ["spend", "target", "target", "$/1k", "spend", "$/1k", "multiplier", "/", "max",
                                "calls", "spent", "$"]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert rows["auto"][1:] == ["2", "2.5000", "1.500", "/", "100", "2", "0.005000"]
    assert rows["auto/cheap"][1:] == ["0.5", "-", "1.000", "/", "20", "0", "0"]  # a target, nothing spent yet
    assert rows["auto/use"][1:] == ["3", "-", "1.000", "/", "-10..100", "0", "0"]  # a floor below 0 is shown
