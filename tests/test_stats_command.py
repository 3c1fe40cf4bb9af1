"""`aisia stats`: the table and the JSON from a memory snapshot and from Redis, and --reset."""

from __future__ import annotations

import asyncio
import json

from aisia_plugin.breaker import FailureKind
from aisia_plugin.cli import main
from aisia_plugin.engine import Engine
from aisia_plugin.learning import OutcomeRecord
from aisia_plugin.policy import load_policy
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


def test_memory_snapshot_table_json_and_reset(tmp_path, capsys):
    st = MemoryState()
    _learn(st)
    path = tmp_path / "state.json"
    st.save_file(path)
    assert main(["stats", "--state", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["deployment", "domain", "count", "pulls", "mean", "reward", "alpha", "beta", "avg",
                              "latency", "s", "error", "rate", "breaker"]
    rows = {(line.split()[0], line.split()[1]) if not line.startswith(" ") else ("", line.split()[0]): line.split()
            for line in out[2:]}
    assert rows[("gpt-4o", "(all)")][2] == "8" and rows[("gpt-4o", "(all)")][-1] == "CLOSED"
    assert rows[("", "coding")][1] == "8"
    assert rows[("groq-8b", "(all)")][-1] == "OPEN" and rows[("groq-8b", "(all)")][8] == "1.000"  # error rate
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
