"""The contract between the Redis store and its Lua scripts (aisia_plugin/state/scripts.py,
docs/state.md#the-scripts), checked without a server: each script takes one named JSON document
and reads exactly the names its builder writes; the record field tables are generated from the
Python records, never written again in Lua. (tests/test_redis_store.py and
tests/test_store_contract.py run the scripts on a real redis-server.)"""

from __future__ import annotations

import json
import re
from importlib import resources
from types import SimpleNamespace

import pytest

from aisia_plugin.breaker import CircuitBreaker
from aisia_plugin.learning import LearningRules
from aisia_plugin.pacing import PaceRule
from aisia_plugin.state import scripts

LUA = resources.files("aisia_plugin.state") / "lua"
_BREAKER = CircuitBreaker(SimpleNamespace(failure_threshold=3, timeout_s=30.0, half_open_max_calls=1,
                                          rate_limit_cooldown_s=5.0, max_retry_after_s=300.0))


def _own(name: str) -> str:
    """Script `name`'s own code, its comments taken out."""
    return re.sub(r"--[^\n]*", "", (LUA / f"{name}.lua").read_text(encoding="utf-8"))


def _documents() -> dict[str, str]:
    rec = scripts.seeded_record
    return {
        "record": scripts.record_doc(tag="t:", epoch="e", process="p", seq=1, bandit_ttl=60, breaker_ttl=60,
                                     rules=scripts.record_rules(LearningRules(_BREAKER)), ops=[]),
        "reserve": scripts.reserve_doc(tag="t:", deployment="a", now=1.0, timeout=30.0, max_calls=1, lease=5.0,
                                       breaker_ttl=60),
        "count": scripts.count_doc(ttl=5),
        "refresh": scripts.refresh_doc(tag="t:", known_version=""),
        "peers": scripts.peers_doc(now=1.0, window=60.0, max_calls=10, ttl=61,
                                   calls=[scripts.peer_call(key_index=2, member="p:1|k|1", score=1.0)]),
        "seed": scripts.seed_doc(tag="t:", epoch="e", bandit_ttl=60, breaker_ttl=60, tick="0.0", applied=[],
                                 lkgp={}, arms=[rec(deployment="a", domain="", fields={})], breakers=[], paces=[],
                                 quality=[]),
        "contextual": scripts.contextual_doc(tag="t:", process="p", gamma=1.0, ttl=60, others=None, columns=[]),
    }


def test_every_script_has_a_document_builder():
    assert set(_documents()) == set(scripts.NAMES)


@pytest.mark.parametrize("name", scripts.NAMES)
def test_a_script_reads_by_name_exactly_what_its_builder_sends(name):
    lua = _own(name)
    assert "local a = cjson.decode(ARGV[1])" in lua
    # no positional argument: ARGV[1] is the document; only the contextual fold's blobs follow it
    positional = [m for m in re.findall(r"ARGV\[([^\]]+)\]", lua) if m != "1"]
    if name == "contextual":
        assert positional and all(p.startswith("b") for p in positional)  # the blobs, by a running index
    else:
        assert positional == []
    sent = set(json.loads(_documents()[name]))
    read = set(re.findall(r"\ba\.(\w+)", lua))
    assert read == sent, f"{name}.lua reads {sorted(read - sent)} not sent, leaves {sorted(sent - read)} unread"


def test_a_spend_target_travels_with_its_four_values_by_name():
    rules = LearningRules(_BREAKER, pacing={"auto": PaceRule(target_usd_per_1k=2.0, rate=0.05, max_multiplier=8.0,
                                                   min_multiplier=-1.0)})
    assert scripts.record_rules(rules)["pace_rules"] == {"auto": {"target": 2.0, "rate": 0.05, "max": 8.0, "min": -1.0}}
    read = set(re.findall(r"\brule\.(\w+)", (LUA / "common.lua").read_text(encoding="utf-8")))
    assert read == {"target", "rate", "max", "min"}


def test_the_record_tables_are_generated_once_and_written_nowhere_in_lua():
    tables = re.findall(r"^local (\w+) = ", scripts.record_tables(), re.M)
    assert {"ARM", "ARM_DEFAULT", "CB", "CB_DEFAULT", "PACE", "PACE_DEFAULT", "QUALITY"} <= set(tables)
    for f in LUA.iterdir():
        if f.name.endswith(".lua"):
            text = f.read_text(encoding="utf-8")
            assert not [t for t in tables if re.search(rf"^local {t}\b", text, re.M)], f.name
    for name in scripts.NAMES:
        loaded = scripts.source(name)
        assert all(loaded.count(f"local {t} = ") == 1 for t in tables)
        assert loaded.index("local ARM = ") < loaded.index("local function read_arm")


def test_a_reply_is_read_by_name_and_a_name_out_of_contract_is_a_clear_error():
    ok = scripts.read_reply(scripts.RecordReply, [b"status", b"ok", b"version", b"7", b"tick", b"3"], "record")
    assert (ok.status, ok.version, ok.tick, ok.epoch) == (b"ok", b"7", b"3", None)
    with pytest.raises(scripts.ReplyError, match=r"record\.lua answered bogus, status.*RecordReply"):
        scripts.read_reply(scripts.RecordReply, [b"status", b"ok", b"bogus", b"1"], "record")
    with pytest.raises(scripts.ReplyError, match=r"seed\.lua answered status.*SeedReply.*epoch"):
        scripts.read_reply(scripts.SeedReply, [b"status", b"seeded"], "seed")

