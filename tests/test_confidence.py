"""Local-first's pure parts: the confidence rule (each part alone, then together), which
candidates each side leaves out, and the hedging lexicon read on an answer."""

import math
from types import SimpleNamespace

import pytest

from aisia_plugin.confidence import combine, confidence, defect_factor, escalates, token_confidence
from aisia_plugin.local_first import CLOUD, ESCALATED, LOCAL, LOCAL_FIRST, left_out, side_of
from aisia_plugin.policy.loader import load_policy
from aisia_plugin.signals import HEDGING, reader_for

PENALTIES = {"refusal": 1.0, "empty_answer": 1.0, "truncated": 0.5, "invalid_json": 1.0, "hedging": 0.4}


def test_token_part_is_the_geometric_mean_probability():
    assert token_confidence([math.log(0.9)] * 5) == pytest.approx(0.9)
    assert token_confidence([math.log(0.5), math.log(0.8)]) == pytest.approx(math.sqrt(0.4))
    assert token_confidence([]) is None
    # what no server should send is skipped, a positive value read as 0 (probability 1)
    assert token_confidence([float("nan"), None, "x", True, math.log(0.25)]) == pytest.approx(0.25)
    assert token_confidence([0.3]) == 1.0
    assert token_confidence([-1e9]) == 0.0


def test_defect_factor_multiplies_distinct_defects():
    assert defect_factor([], PENALTIES) == 1.0
    assert defect_factor(["hedging"], PENALTIES) == pytest.approx(0.6)
    assert defect_factor(["hedging", "truncated", "hedging"], PENALTIES) == pytest.approx(0.3)
    assert defect_factor(["refusal"], PENALTIES) == 0.0
    assert defect_factor(["repeated_answer"], PENALTIES) == 1.0  # no penalty named: nothing taken off


def test_combine_leaves_out_an_unknown_part_with_its_weight():
    assert combine(0.9, 0.6, 0.7, 0.3) == pytest.approx(0.81)
    assert combine(None, 0.6, 0.7, 0.3) == pytest.approx(0.6)
    assert combine(0.9, None, 0.7, 0.3) == pytest.approx(0.9)
    assert combine(None, None, 0.7, 0.3) == 0.0
    assert combine(0.9, 0.6, 0.0, 0.3) == pytest.approx(0.6)


def test_the_documented_worked_example():
    kw = dict(token_weight=0.7, learned_weight=0.3, penalties=PENALTIES)
    kept = confidence([-0.05] * 10, 0.6, (), **kw)
    assert kept.value == pytest.approx(0.7 * math.exp(-0.05) + 0.3 * 0.6)
    assert not escalates(kept, 0.75)
    low = confidence([-0.9] * 10, 0.6, (), **kw)
    assert low.value == pytest.approx(0.7 * math.exp(-0.9) + 0.3 * 0.6)
    assert escalates(low, 0.75)
    refused = confidence([-0.01] * 10, 0.9, ("refusal",), **kw)
    assert refused.value == 0.0 and refused.defects == ("refusal",)
    assert "confidence 0.00 < 0.75" in refused.explain(0.75) and "refusal" in refused.explain(0.75)
    no_lp = confidence([], 0.8, (), **kw)
    assert no_lp.token_part is None and no_lp.value == pytest.approx(0.8) and no_lp.tokens == 0
    assert "no log-probabilities" in no_lp.explain(0.75)


def _dep(i, local):
    return SimpleNamespace(id=i, local=local)


def test_each_side_leaves_out_the_other_while_it_has_a_candidate():
    deps = [_dep("l1", True), _dep("l2", True), _dep("c1", False)]
    assert left_out(deps, LOCAL, {}) == {"c1": LOCAL_FIRST}
    assert left_out(deps, CLOUD, {}) == {"l1": ESCALATED, "l2": ESCALATED}
    # every local candidate already failed: the call falls over to the cloud ones
    assert left_out(deps, LOCAL, {"l1": "failed", "l2": "failed"}) == {}
    # an escalation never falls back to a local candidate
    assert left_out(deps, CLOUD, {"c1": "failed"}) == {"l1": ESCALATED, "l2": ESCALATED}
    assert left_out(deps, None, {}) == {}


def test_side_of_follows_the_settings_and_the_stream_setting():
    on = SimpleNamespace(enabled=True, streams="skip")
    assert side_of(on, stream=False) == LOCAL
    assert side_of(on, stream=True) is None
    assert side_of(SimpleNamespace(enabled=True, streams="local"), stream=True) == LOCAL
    assert side_of(SimpleNamespace(enabled=False, streams="local"), stream=False) is None
    assert side_of(None, stream=False) is None


def test_the_shipped_defaults_of_local_first():
    ap = load_policy().aliases["auto"]
    lf = ap.local_first
    assert (lf.enabled, lf.min_confidence, lf.streams, lf.request_logprobs) == (False, 0.75, "skip", True)
    assert (lf.logprob_weight, lf.learned_weight, lf.evidence_weight) == (0.7, 0.3, 1.0)
    assert lf.penalties.model_dump() == PENALTIES


@pytest.mark.parametrize("text", [
    "I'm not sure, but the capital might be Sydney.", "I think it is 42.", "Maybe 1887?",
    "Je ne suis pas sûr, mais c'est 12.", "Je pense que oui.", "No estoy seguro: quizá 7.",
    "Ich bin mir nicht sicher, vielleicht 3.", "Non sono sicuro, forse 8.", "Não tenho certeza, talvez 9.",
    "The answer is 4, but I could be wrong."])
def test_hedging_answers_are_read_in_six_languages(text):
    reader = reader_for(load_policy().signals)
    found = reader.hedges(text)
    assert found is not None and found.kind == HEDGING


@pytest.mark.parametrize("text", [
    "The capital of Australia is Canberra.", "Paris.", "Sure: here is the code.", "", "La réponse est 42.",
    "Think of it as a queue."])
def test_plain_answers_do_not_hedge(text):
    assert reader_for(load_policy().signals).hedges(text) is None


def test_hedging_is_no_conversation_signal():
    reader = reader_for(load_policy().signals)
    from aisia_plugin.signals import AnswerView

    assert all(s.kind != HEDGING for s in reader.read_answer(AnswerView("I'm not sure, maybe 3.")))


def test_token_logprobs_are_read_from_objects_and_dicts_and_stripped():
    from aisia_plugin.litellm.escalation import strip_logprobs, token_logprobs

    as_objects = SimpleNamespace(choices=[SimpleNamespace(logprobs=SimpleNamespace(
        content=[SimpleNamespace(logprob=-0.1), SimpleNamespace(logprob=-0.3)]))])
    assert token_logprobs(as_objects) == [-0.1, -0.3]
    as_dicts = SimpleNamespace(choices=[SimpleNamespace(logprobs={"content": [{"logprob": -2.0}, {"token": "x"}]})])
    assert token_logprobs(as_dicts) == [-2.0]
    assert token_logprobs(SimpleNamespace(choices=[SimpleNamespace(logprobs=None)])) == []
    assert token_logprobs(SimpleNamespace(choices=[])) == [] and token_logprobs(None) == []
    strip_logprobs(as_objects)
    assert as_objects.choices[0].logprobs is None
    plain = SimpleNamespace(choices=[{"logprobs": {"content": []}, "message": {}}])
    strip_logprobs(plain)
    assert plain.choices[0] == {"message": {}}


def test_opened_marks_a_local_first_call_and_asks_for_logprobs_only_when_the_client_did_not():
    from aisia_plugin.litellm.escalation import opened
    from aisia_plugin.local_first import Side

    settings = SimpleNamespace(enabled=True, streams="skip", request_logprobs=True)
    ap = SimpleNamespace(local_first=settings)
    call, data = SimpleNamespace(local_first=None), {"messages": []}
    opened(call, ap, data, "acompletion")
    assert data["logprobs"] is True and call.local_first == Side(LOCAL, added_logprobs=True)
    call, data = SimpleNamespace(local_first=None), {"messages": [], "logprobs": False}
    opened(call, ap, data, "acompletion")
    assert data["logprobs"] is False and call.local_first == Side(LOCAL)
    call, data = SimpleNamespace(local_first=None), {"messages": [], "stream": True}
    opened(call, ap, data, "acompletion")  # streams: skip
    assert call.local_first is None and "logprobs" not in data
    for call_type, body in (("text_completion", {"prompt": "x"}), ("aresponses", {"input": "x"})):
        call = SimpleNamespace(local_first=None)
        opened(call, ap, body, call_type)  # other APIs: routed as usual
        assert call.local_first is None and "logprobs" not in body


def test_validate_warns_about_a_local_first_alias_with_one_side_only(tmp_path):
    from aisia_plugin.commands.validate import check

    (tmp_path / "cfg.yaml").write_text(
        "model_list:\n"
        "  - {model_name: gpu, litellm_params: {model: hosted_vllm/llama, api_base: 'http://127.0.0.1:9/v1'},\n"
        "     model_info: {id: gpu, input_cost_per_token: 1.0e-7, output_cost_per_token: 2.0e-7}}\n"
        "  - {model_name: cloud, litellm_params: {model: openai/gpt-4o, api_key: sk-x}, model_info: {id: cloud}}\n")
    (tmp_path / "p.yaml").write_text(
        "version: 1\naliases:\n"
        "  t/both: {description: both sides, local_first: {enabled: true}}\n"
        "  t/nocloud: {description: local only, candidates: {locality: local}, local_first: {enabled: true}}\n"
        "  t/nolocal: {description: cloud only, candidates: {locality: remote}, local_first: {enabled: true}}\n")
    report = check([tmp_path / "p.yaml"], deployments=tmp_path / "cfg.yaml")
    said = {w.path: w.message for w in report.warnings if "local_first" in w.path}
    assert set(said) == {"aliases.t/nocloud.local_first.enabled", "aliases.t/nolocal.local_first.enabled"}, said
    assert "cannot be escalated" in said["aliases.t/nocloud.local_first.enabled"]
    assert "local-first does nothing" in said["aliases.t/nolocal.local_first.enabled"]
