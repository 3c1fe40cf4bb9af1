"""The memory store's state file: a round trip keeps every learned value, and a corrupted or
hand-edited file never puts a value into a decision that its arithmetic would choke on."""

from __future__ import annotations

import json
import math
import random

import pytest

from aisia_plugin.bandit import ArmStats, update
from aisia_plugin.breaker import BreakerState
from helpers import deployment
from aisia_plugin.engine import Engine
from aisia_plugin.policy import load_policy
from aisia_plugin.state.memory import MemoryState

POLICY = load_policy()
DEPS = [deployment(i, c, provider=i, model=f"p/{i}", model_name="g") for i, c in (("a-1", 3.0), ("b-2", 0.5), ("c-3", 1.0))]
MSG = [{"role": "user", "content": "write a python function that parses json"}]


def test_dump_and_load_keep_everything(tmp_path):
    st = MemoryState()
    st.put_arm("a-1", None, update(ArmStats(), reward=0.8, latency_s=1.2, failed=False, tick=3.0))
    st.put_arm("a-1", "coding", update(ArmStats(), reward=0.4, latency_s=0.7, failed=True, tick=4.0))
    st.put_breaker("b-2", BreakerState(state="OPEN", failures=5, last_failure_time=12.5))
    st.set_last_known_good("auto", "a-1")
    st.ticks = 4.0
    path = tmp_path / "state.json"
    st.save_file(path)
    back = MemoryState.load_file(path, [d.id for d in DEPS])
    assert back.dump() == st.dump()
    assert back.arm("a-1", "coding") == st.arm("a-1", "coding") and back.breaker("b-2").state == "OPEN"


@pytest.mark.parametrize("bad", ["abc", None, True, math.nan, math.inf, [1], {"x": 1}])
def test_bad_values_fall_back_to_defaults_and_decisions_still_work(tmp_path, bad):
    data = {"ticks": bad, "bandit": {"a-1": {"pulls": bad, "total_reward": 3.0, "alpha": bad, "avg_latency": bad},
                                     "b-2:coding": {"pulls": 4, "total_reward": bad, "beta": bad, "count": 2.0}},
            "breakers": {"c-3": {"state": bad, "failures": bad, "rate_limited_until": bad}, "a-1": bad},
            "lkgp": {"auto/lkgp": bad}}
    path = tmp_path / "state.json"
    path.write_text(json.dumps(data, allow_nan=True))
    st = MemoryState.load_file(path, [d.id for d in DEPS])
    a = st.arm("a-1")
    # A reward total cannot exceed the pulls it came from: clamped to them.
    assert (a.pulls, a.alpha, a.avg_latency, a.total_reward) == (0.0, 1.0, 5.0, 0.0)
    b = st.arm("b-2", "coding")
    assert (b.pulls, b.total_reward, b.beta, b.count) == (4.0, 0.0, 1.0, 2)
    assert st.breaker("c-3") == BreakerState() and st.breaker("a-1") == BreakerState()
    # A string is a deployment id like any other (LKGP says when it is not in the pool).
    assert st.ticks == 0.0 and st.last_known_good("auto/lkgp") == (bad if isinstance(bad, str) else None)
    eng = Engine(POLICY, clock=lambda: 100.0, rng=random.Random(1), store=st)
    for alias in POLICY.aliases:
        if alias == "auto/offline":  # local deployments only: none here
            continue
        d = eng.decide(alias, MSG, DEPS)
        assert d.deployment_id in {x.id for x in DEPS}
        assert d.final_score is None or not math.isnan(d.final_score), (alias, d.reason)


@pytest.mark.parametrize("text", ["[1, 2]", '"state"', '{"bandit": [1]}', '{"breakers": "x"}', "{not json"])
def test_a_file_that_is_no_state_is_a_clear_error(tmp_path, text):
    path = tmp_path / "state.json"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        MemoryState.load_file(path)
    assert str(path) in str(err.value) or "Expecting" in str(err.value)


def test_out_of_range_values_are_clamped_or_rejected_by_the_one_reader(tmp_path):
    """The snapshot's reader is the Redis store's (state/records.py): the same input reads the
    same everywhere, including read_breaker called alone."""
    from aisia_plugin.state.records import read_breaker

    data = {"ticks": -3, "bandit": {"a-1": {"pulls": 10, "total_reward": 25, "alpha": 0.2, "beta": 1e300,
                                            "avg_latency": -2.0, "latency_var": -1, "failures": 40, "count": -5,
                                            "tick": 1e300}},
            "breakers": {"a-1": {"state": "open", "failures": 7, "last_failure_time": 1e300,
                                 "rate_limited_until": 1e300, "probes_in_flight": -2, "success_count": "2"},
                         "b-2": {"state": "half-open", "probe_reserved_at": "12.5"}, "c-3": {"state": 2}},
            "lkgp": {}}
    path = tmp_path / "state.json"
    path.write_text(json.dumps(data))
    st = MemoryState.load_file(path)
    a = st.arm("a-1")
    assert (a.pulls, a.total_reward, a.alpha, a.beta, a.avg_latency, a.latency_var, a.failures, a.count, a.tick) == \
        (10.0, 10.0, 1.0, 1.0, 5.0, 0.0, 10.0, 0, 0.0)
    assert st.ticks == 0.0
    b = st.breaker("a-1")
    assert (b.state, b.failures, b.last_failure_time, b.rate_limited_until, b.probes_in_flight, b.success_count) == \
        ("OPEN", 7, 0.0, 0.0, 0, 2)
    assert st.breaker("b-2") == BreakerState(state="HALF_OPEN", probe_reserved_at=12.5)
    assert st.breaker("c-3").state == "OPEN"
    for dep, raw in data["breakers"].items():
        assert read_breaker(raw) == st.breaker(dep)


def test_each_value_read_otherwise_is_named_with_its_record(tmp_path):
    """Issue 11, finding 8: the hostile state file of the issue, each value clamped or rejected
    and named with its record and file; a decision on it is the cold start's, not UCB1's 1e150."""
    data = {"ticks": 10, "bandit": {"a-1": {"pulls": 1e-300, "total_reward": 1e-300, "count": 1},
                                    "b-2": {"pulls": 2, "total_reward": 100, "avg_latency": -50, "count": 2},
                                    "c-3": {"pulls": 0.5, "total_reward": 0.5, "count": 1},
                                    "c-3:coding": {"pulls": 1.0, "total_reward": 1.0, "count": 1}},
            "breakers": {"c-3": {"state": "open", "failures": 5, "last_failure_time": 1e300},
                         "b-2": {"state": "ajar"}, "a-1": {"state": "CLOSED", "failures": 0}},
            "lkgp": {"auto": 5}}
    path = tmp_path / "state.json"
    path.write_text(json.dumps(data))
    said = []
    st = MemoryState.load_file(path, [d.id for d in DEPS], warn=said.append)
    assert said == [
        f"{path}: bandit 'a-1': pulls: 1e-300 is not 0 or a count of at least 1: read as 0.0",
        f"{path}: bandit 'a-1': total_reward: 1e-300 exceeds the pulls (0): read as 0.0",
        f"{path}: bandit 'b-2': total_reward: 100.0 exceeds the pulls (2): read as 2.0",
        f"{path}: bandit 'b-2': avg_latency: -50 is not a number in [0, 1e+06]: read as 5.0",
        f"{path}: bandit 'c-3': pulls: 0.5 is not 0 or a count of at least 1: read as 0.0",
        f"{path}: bandit 'c-3': total_reward: 0.5 exceeds the pulls (0): read as 0.0",
        f"{path}: breakers 'c-3': last_failure_time: 1e+300 is not a time in [0, 1e+11] (seconds since the epoch): "
        "read as 0.0",
        f"{path}: breakers 'b-2': state: 'ajar' is not CLOSED, HALF_OPEN, OPEN or a code 0-2: read as 'CLOSED'",
        f"{path}: lkgp 'auto': 5 is not a deployment id: ignored",
    ]
    assert st.arm("a-1").pulls == 0.0 and st.arm("b-2").mean_reward == 1.0 and st.arm("b-2").avg_latency == 5.0
    assert st.arm("c-3", "coding").pulls == 1.0  # a valid record beside a bad one is kept as it is
    assert st.breaker("c-3").state == "OPEN" and st.breaker("c-3").last_failure_time == 0.0
    eng = Engine(POLICY, clock=lambda: 100.0, rng=random.Random(1), store=st)
    d = eng.decide("auto", MSG, DEPS)
    assert all(s.score is None or s.score < 1e6 or s.score == math.inf for s in d.scores), d.reason
    # A state file read well says nothing; without a callback the notes go to the log.
    good = tmp_path / "good.json"
    MemoryState().save_file(good)
    MemoryState.load_file(good, warn=said.append)
    assert len(said) == 9


def test_a_hostile_state_file_is_named_by_explain(tmp_path, capsys):
    from aisia_plugin.cli import main

    path = tmp_path / "state.json"
    path.write_text(json.dumps({"bandit": {"groq-llama-3.1-8b": {"pulls": 1e-300, "total_reward": 1e-300}}}))
    team = tmp_path / "ucb1.yaml"  # the seed's UCB1 by name, whose row says "untried" (auto is contextual)
    team.write_text("version: 1\naliases:\n  auto: {strategy: ucb1}\n")
    assert main(["explain", "--policy", str(team), "--state", str(path), "hello"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines()[0] == (f"aisia explain: warning: {path}: bandit 'groq-llama-3.1-8b': pulls: 1e-300 is not "
                                   "0 or a count of at least 1: read as 0.0")
    row = next(line for line in out.splitlines() if "groq-llama-3.1-8b " in line and "score=" in line)
    assert row.split() == ["groq-llama-3.1-8b", "score=inf"]  # untried, as the stored pulls say nothing


async def test_snapshot_is_loaded_at_start_and_written_on_close(tmp_path):
    from aisia_plugin.learning import OutcomeRecord
    from aisia_plugin.state import open_store

    path = tmp_path / "snap.json"
    policy = POLICY.model_copy(update={"state": POLICY.state.model_copy(update={"snapshot_path": str(path)})})
    st = open_store(policy)
    await st.start()  # no file yet: a first start
    eng = Engine(policy, clock=lambda: 50.0, store=st)
    st.record_outcome(OutcomeRecord("a-1", 50.0, None, 0.9, 0.4, "auto", "coding"), eng.rules)
    await st.aclose()
    again = open_store(policy)
    await again.start()
    assert again.dump() == st.dump() and again.arm("a-1", "coding").count == 1
    path.write_text("{not json")
    with pytest.raises(ValueError, match="snap.json"):
        await open_store(policy).start()


def test_a_deployment_id_holding_a_colon_keeps_its_records_through_the_snapshot():
    # An Ollama name is an id with a ':' ("llama3.2:3b", a deployment's model_name when it has no
    # model_info.id). load() split every key at its last ':' unless told the ids, which the proxy's
    # start does not: the arm and the evidence came back as deployment "llama3.2", domain "3b",
    # and "llama3.2:3b" started cold (found by a review).
    from aisia_plugin.quality import QualityStats

    st = MemoryState()
    arm, q = ArmStats(pulls=3.0, total_reward=2.7, count=3), QualityStats(weight=1.0, total=0.0, feedback=1.0, tick=3.0)
    for dep in ("llama3.2:3b", "plain"):
        st.put_arm(dep, None, arm)
        st.put_arm(dep, "coding", ArmStats(pulls=1.0, total_reward=0.5, count=1))
        st.quality.setdefault(None, {})[dep] = q
        st.quality.setdefault("coding", {})[dep] = q
    st.put_arm("orphan:math", None, arm)  # an id whose part before ':' is no deployment
    again = MemoryState.load(json.loads(json.dumps(st.dump())))
    for dep in ("llama3.2:3b", "plain"):
        assert again.arm(dep) == arm and again.arm(dep, "coding") == ArmStats(pulls=1.0, total_reward=0.5, count=1)
        assert again.quality_of(dep) == q and again.quality_of(dep, "coding") == q
    assert again.arm("llama3.2", "3b") is None and again.arm("orphan:math") == arm
