"""Conversation signals: the lexicon reader per kind and language, the hard
cases, the structural signals (rephrase, regenerate, the answer's own), conversation identity and
attribution, the policy section's validation, RE2-only matching, and the precision floor on the
labelled set (tests/data/signal_followups.jsonl)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aisia_plugin.conversation import (Caller, Judgement, Turn, answer_fingerprint, conversation_key, is_regenerate,
                                       judge, judged_turn, new_user_text, previous_user_text, prompt_fingerprint,
                                       tool_results)
from aisia_plugin.policy import PolicyError, load_policy
from aisia_plugin.policy.loader import default_signal_reader
from aisia_plugin.signal_eval import NEGATIVE, PRECISION_FLOOR, evaluate, held_out, load_items
from aisia_plugin.signals import (CORRECTION, DISSATISFACTION, EMPTY_ANSWER, INVALID_JSON, KINDS, REFUSAL,
                                  REPEATED_ANSWER, REPHRASE, SATISFACTION, TOOL_ERROR, TRUNCATED, WEIGHTED_KINDS, AnswerView,
                                  SignalReader, _NOT_ALNUM, own_words, reader_for, similarity, unicode_boundaries)

LANGUAGES = ("en", "fr", "es", "de", "it", "pt")


@pytest.fixture(scope="module")
def reader() -> SignalReader:
    return default_signal_reader()


def kinds(reader, text) -> set[str]:
    return {s.kind for s in reader.read_followup(text)}


# -- the lexicons, per kind and language (messages not in the labelled set) ------------------

FOLLOWUPS = [
    ("en", "No, that's incorrect. It was 1492.", {CORRECTION}),
    ("en", "you are totally wrong", {CORRECTION}),
    ("en", "the code still doesn't work", {DISSATISFACTION}),
    ("en", "thank you, that helped a lot", {SATISFACTION}),
    ("fr", "Non, c'est faux, il y en a trois.", {CORRECTION}),
    ("fr", "Votre réponse est incorrecte.", {CORRECTION}),
    ("fr", "ça ne fonctionne toujours pas", {DISSATISFACTION}),
    ("fr", "Merci, c'est parfait !", {SATISFACTION}),
    ("es", "Eso está mal, son tres.", {CORRECTION}),
    ("es", "Estás equivocado.", {CORRECTION}),
    ("es", "Todavía no funciona.", {DISSATISFACTION}),
    ("es", "¡Muchas gracias, funciona!", {SATISFACTION}),
    ("de", "Das stimmt so nicht.", {CORRECTION}),
    ("de", "Das Ergebnis ist falsch.", {CORRECTION}),
    ("de", "Es funktioniert leider nicht.", {DISSATISFACTION}),
    ("de", "Vielen Dank, das hat geholfen!", {SATISFACTION}),
    ("it", "Questo è sbagliato.", {CORRECTION}),
    ("it", "Hai torto.", {CORRECTION}),
    ("it", "Non funziona ancora.", {DISSATISFACTION}),
    ("it", "Grazie mille, perfetto!", {SATISFACTION}),
    ("pt", "Isso está errado.", {CORRECTION}),
    ("pt", "Você errou.", {CORRECTION}),
    ("pt", "Ainda não funciona.", {DISSATISFACTION}),
    ("pt", "Muito obrigado, deu certo!", {SATISFACTION}),
]


@pytest.mark.parametrize("lang,text,want", FOLLOWUPS, ids=[f"{f[0]}-{i}" for i, f in enumerate(FOLLOWUPS)])
def test_a_follow_up_raises_its_kind_in_each_language(reader, lang, text, want):
    got = reader.read_followup(text)
    assert {s.kind for s in got} == want
    assert all(s.language and s.entry for s in got), "a lexicon signal names its language and entry"


HARD_CASES = [
    # negation and idioms
    ("no problem, thanks", {SATISFACTION}),
    ("not bad at all", {SATISFACTION}),
    ("c'est pas faux", set()),
    ("Ce n'est pas faux, mais développe.", set()),
    ("no está mal", {SATISFACTION}),
    ("non è sbagliato", set()),
    ("não está errado", set()),
    ("das ist nicht falsch", set()),
    ("nothing wrong with it, now add logging", set()),
    ("No, that's fine, keep it.", set()),
    # a new question that contains a signal word
    ("what's wrong with my code?", set()),
    ("Qu'est-ce qui ne va pas dans ce script ?", set()),
    ("¿Qué está mal en mi consulta?", set()),
    ("Was ist falsch an meiner Abfrage?", set()),
    ("Is it wrong to use goto in C?", set()),
    ("Why doesn't my function return anything?", set()),
    ("Explain how it works.", set()),
    ("If it doesn't work, what then?", set()),
    # politeness that judges nothing
    ("Thanks in advance!", set()),
    ("Can you write a haiku about autumn? Thanks!", set()),
    ("Merci d'avance.", set()),
    # "tem razão" is the user agreeing only when it is said to the assistant (second person, or
    # opening a clause); of someone else, as a question, it judges nothing
    ("Meu professor disse que isso está errado, ele tem razão?", set()),
    ("Ele tem razão.", set()),
    ("Ah, tem razão!", {SATISFACTION}),
    ("Tem razão", {SATISFACTION}),
    ("Você tem razão, eu me enganei.", {SATISFACTION}),
    # a negative wins over thanks
    ("thanks, but that's wrong", {CORRECTION}),
    ("Merci mais ça ne marche pas", {DISSATISFACTION}),
]


@pytest.mark.parametrize("text,want", HARD_CASES)
def test_hard_cases(reader, text, want):
    assert kinds(reader, text) == want


def test_code_blocks_quotes_and_mentions_are_not_the_users_words(reader):
    quoted = "> That's wrong, it is Sydney.\nA student wrote this. How should I grade it?"
    fenced = "Here is my test:\n```python\nassert x == 1, \"that's wrong\"\n```\nHow do I make it pass?"
    tilde = "~~~\nc'est faux\n~~~\nTraduis ce message."
    inline = "Why does `grep 'is wrong'` print nothing?"
    mention = 'Translate "that is wrong" into German.'
    guillemets = "Traduis « c'est faux » en anglais."
    for text in (quoted, fenced, tilde, inline, mention, guillemets):
        assert kinds(reader, text) == set(), text
    assert "that's wrong" not in own_words(fenced) and "How do I make it pass?" in own_words(fenced)
    assert own_words("```\nunclosed fence, that's wrong") == ""
    # The same words outside the quote and the code are read.
    assert kinds(reader, quoted.replace("> ", "")) == {CORRECTION}


def test_a_long_new_task_is_read_in_its_first_sentence_only(reader):
    task = ("I am preparing a lesson on misinformation for my students next week. Many people repeat claims "
            "that are simply false, and that's wrong. Write an introduction of two hundred words explaining why "
            "people believe false claims and how a teacher can answer a student who says something wrong.")
    assert kinds(reader, task) == set()
    # The sentence alone is a short follow-up, and is read.
    assert kinds(reader, "That's wrong.") == {CORRECTION}
    # A long follow-up that opens with the correction is one.
    assert kinds(reader, "That's wrong. " + task) == {CORRECTION}
    # A trailing thank-you on a long request is politeness.
    assert kinds(reader, task + " Thanks a lot!") == set()


def test_typographic_apostrophes_and_decomposed_accents_are_read_as_typed(reader):
    assert kinds(reader, "That\u2019s wrong") == {CORRECTION}
    assert kinds(reader, "C\u2019est faux") == {CORRECTION}
    assert kinds(reader, "E\u0301 sbagliato") == {CORRECTION}  # "È" typed as E + combining grave


def test_word_boundaries_see_accented_letters():
    # RE2's \b is ASCII-only; the lexicon's \b sees "ó" as a letter.
    import re2

    pattern = re2.compile(unicode_boundaries(r"\bsirvió\b"))
    assert pattern.search("no sirvió, nada")
    assert pattern.search("no sirvió")
    assert not pattern.search("no sirvióx")
    assert not re2.compile(r"\bsirvió\b").search("no sirvió, nada")  # why the rewrite exists
    assert unicode_boundaries(r"a\\b") == r"a\\b"  # an escaped backslash followed by b is left alone


def test_non_strings_and_empty_messages_raise_nothing(reader):
    for text in (None, 3, "", "   ", ["that's wrong"]):
        assert reader.read_followup(text) == ()


# -- rephrase and regenerate -------------------------------------------------------------------

def test_rephrase_is_the_previous_question_in_other_words(reader):
    assert reader.rephrase_of("How can I reverse a Python list?", "How do I reverse a list in Python?").kind == REPHRASE
    assert reader.rephrase_of("Comment on inverse une liste Python ?", "Comment inverser une liste en Python ?")
    assert reader.rephrase_of("How do I sort a dictionary by value?", "How do I reverse a list in Python?") is None
    assert reader.rephrase_of("thanks a lot", "thanks") is None  # too short to compare
    assert similarity("abc def", "abc def") == 1.0 and similarity("", "abc") == 0.0
    assert 0.0 < similarity("reverse a list", "reverse the list") < 1.0


def test_similarity_reads_as_words_what_str_isalnum_calls_letters_and_digits():
    text = "".join(map(chr, range(sys.maxunicode + 1)))  # every code point
    assert _NOT_ALNUM.sub(" ", text) == "".join(c if c.isalnum() else " " for c in text)


SYSTEM = {"role": "system", "content": "You are terse."}
Q1 = {"role": "user", "content": "What is the capital of Australia?"}
A1 = {"role": "assistant", "content": "Sydney."}
Q2 = {"role": "user", "content": "That's wrong."}


def test_regenerate_is_the_same_history_sent_again():
    before = [SYSTEM, Q1]
    assert is_regenerate(before, [dict(m) for m in before])
    # Ids and metadata a client adds on each send do not make another prompt.
    assert is_regenerate(before, [SYSTEM, {**Q1, "id": "msg_2"}])
    assert not is_regenerate(before, [SYSTEM, Q1, A1, Q2])  # the conversation went on
    assert not is_regenerate(before, [SYSTEM, {"role": "user", "content": "And of Austria?"}])  # edited
    assert not is_regenerate([], [])
    assert is_regenerate([SYSTEM, Q1, A1, Q2], [SYSTEM, Q1, A1, Q2])
    assert prompt_fingerprint([SYSTEM, Q1]) == prompt_fingerprint([SYSTEM, Q1, A1]) != prompt_fingerprint([Q1])


# -- the answer's own signals -------------------------------------------------------------------

REFUSALS = {
    "en": "I'm sorry, but I can't help with that.",
    "fr": "Je suis désolé, mais je ne peux pas vous aider.",
    "es": "Lo siento, pero no puedo ayudarte con eso.",
    "de": "Es tut mir leid, aber dabei kann ich nicht helfen.",
    "it": "Mi dispiace, ma non posso aiutarti.",
    "pt": "Desculpe, mas não posso ajudar com isso.",
}


@pytest.mark.parametrize("lang", LANGUAGES)
def test_a_refusal_is_read_at_the_answers_start(reader, lang):
    got = reader.read_answer(AnswerView(REFUSALS[lang]))
    assert [s.kind for s in got] == [REFUSAL] and got[0].language == lang
    late = "Paris is the capital of France. " * 20 + REFUSALS[lang]
    assert reader.read_answer(AnswerView(late)) == ()


def test_empty_truncated_json_and_repeated_answers(reader):
    def read(*args, **kw):
        return {s.kind for s in reader.read_answer(AnswerView(*args, **kw), kw.pop("previous", None))}

    assert read("") == {EMPTY_ANSWER}
    assert read(" \n ") == {EMPTY_ANSWER}
    assert read("", has_tool_calls=True) == set()  # a tool call is an answer
    assert read("The list is sorted and", "length") == {TRUNCATED}
    assert read("", "length") == {TRUNCATED, EMPTY_ANSWER}
    assert read('Here it is: {"a": 1}', wants_json=True) == {INVALID_JSON}
    assert read('{"a": 1}', wants_json=True) == set()
    assert read('```json\n{"a": 1}\n```', wants_json=True) == set()
    assert read('{"a": ', "length", wants_json=True) == {TRUNCATED}  # cut, not malformed
    assert read("not json at all", wants_json=False) == set()
    previous = "The capital of Australia is Sydney, its largest city."
    assert {s.kind for s in reader.read_answer(AnswerView(previous + "!"), previous)} == {REPEATED_ANSWER}
    assert reader.read_answer(AnswerView("The capital is Canberra, not Sydney."), previous) == ()
    assert reader.read_answer(AnswerView("Yes."), "Yes.") == ()  # too short to call a repeat


def test_a_tool_result_that_says_error(reader):
    for text in ("Error: no such file", '{"error": "bad city"}', "KeyError: 'id'",
                 "Traceback (most recent call last):\n  File \"x.py\"", "HTTP 503 Service Unavailable",
                 [{"type": "text", "text": "Fehler: Zugriff verweigert"}]):
        assert reader.read_tool_result(text).kind == TOOL_ERROR, text
    for text in ('{"temperature": 21}', '{"errors": [], "rows": 3}', "The error rate was 2%.", "", None):
        assert reader.read_tool_result(text) is None, text


def test_a_section_is_compiled_once():
    policy = load_policy()
    assert reader_for(policy.signals) is reader_for(load_policy().signals) is default_signal_reader()
    other = policy.signals.model_copy(update={"lead_chars": 50})
    assert reader_for(other) is not reader_for(policy.signals) and reader_for(other).lead_chars == 50


def test_a_disabled_section_learns_nothing_and_local_first_still_reads_an_answer(tmp_path):
    # signals.enabled: false switches the conversation tracking off (no turn stored, nothing read
    # of a follow-up), not local-first's reading of a local answer's defects, which its penalties
    # weigh (before, the reader itself read nothing and the penalties were silently ignored).
    import asyncio
    from types import SimpleNamespace

    import litellm

    from aisia_plugin.engine import Engine
    from aisia_plugin.litellm.conversations import Conversations
    from aisia_plugin.litellm.escalation import assess
    from aisia_plugin.state.memory import MemoryState

    path = tmp_path / "off.yaml"
    path.write_text("version: 1\nsignals:\n  enabled: false\naliases:\n  auto/offline:\n"
                    "    local_first:\n      enabled: true\n")
    policy = load_policy([path])
    store = MemoryState()
    rt = SimpleNamespace(policy=policy, store=store, engine=Engine(policy, store=store))

    async def converse():
        conv = Conversations(rt)
        call = SimpleNamespace(key="k", alias="auto", conversation=None, turn_noted=False, request_id="r1")
        data = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sydney."},
                             {"role": "user", "content": "That's wrong."}]}
        conv.opened(call, data, None)
        conv.answered(call, data, litellm.ModelResponse(choices=[{"message": {"role": "assistant", "content": ""}}]),
                      "local-a", None)
        await conv.drain()
        return call.conversation, store.stats()
    assert asyncio.run(converse()) == (None, {})
    settings = policy.aliases["auto/offline"].local_first
    for text, defect in (("I'm sorry, but I can't help with that.", "refusal"), ("", "empty_answer")):
        response = litellm.ModelResponse(choices=[{"message": {"role": "assistant", "content": text},
                                                   "finish_reason": "stop"}])
        found = assess(rt, settings, {"messages": [{"role": "user", "content": "hi"}]}, response, "local-a", None)
        assert defect in found.defects


# -- conversation identity and attribution -----------------------------------------------------

def test_a_conversation_is_its_caller_and_its_opening():
    alice, bob = Caller("hash-a", "team-1", ""), Caller("hash-b", "team-1", "")
    first, later = [SYSTEM, Q1], [SYSTEM, Q1, A1, Q2]
    assert conversation_key(alice, first) == conversation_key(alice, later)  # the history grows, same key
    assert conversation_key(alice, first) != conversation_key(bob, first)  # another caller, another one
    assert conversation_key(alice, first) != conversation_key(alice, [Q1])  # another system message
    assert conversation_key(alice, first) != conversation_key(Caller("hash-a", "team-1", "user-7"), first)
    # A session id names the conversation, within the caller: a hostile tenant that sends
    # another's session id lands in a conversation of its own.
    assert conversation_key(alice, first, "s-1") == conversation_key(alice, [Q2], "s-1")
    assert conversation_key(alice, first, "s-1") != conversation_key(bob, first, "s-1")
    assert conversation_key(alice, first, "  ") == conversation_key(alice, first)
    assert conversation_key(alice, []).startswith("c:") and conversation_key(alice, [], "x").startswith("s:")


def test_the_new_turn_judges_the_previous_answer():
    assert judged_turn([SYSTEM, Q1]) is None  # a first turn judges nothing
    judged = judged_turn([SYSTEM, Q1, A1, Q2])
    assert (judged.message_index, judged.turn_index) == (2, 0)
    assert judged.answer_fingerprint == answer_fingerprint("Sydney.")
    assert answer_fingerprint("Sydney. ") == answer_fingerprint([{"type": "text", "text": "Sydney."}])
    a2 = {"role": "assistant", "content": "Canberra."}
    judged = judged_turn([SYSTEM, Q1, A1, Q2, a2, {"role": "user", "content": "thanks"}])
    assert (judged.message_index, judged.turn_index) == (4, 1)
    assert new_user_text([SYSTEM, Q1, A1, Q2]) == "That's wrong."
    assert previous_user_text([SYSTEM, Q1, A1, Q2]) == Q1["content"]
    assert previous_user_text([SYSTEM, Q1]) is None


def test_in_an_agent_loop_the_tool_results_judge_the_call():
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "Error: unknown city"}
    messages = [SYSTEM, Q1, call, result]
    judged = judged_turn(messages)
    assert judged.message_index == 2
    assert judged.answer_fingerprint == answer_fingerprint(None, call["tool_calls"])
    assert tool_results(messages) == ["Error: unknown city"]
    assert tool_results([SYSTEM, Q1]) == []


def test_judge_finds_the_stored_turn_a_request_judges():
    conv = conversation_key(Caller("k"), [SYSTEM, Q1])
    first = Turn(conv, 0, "cheap", prompt_fingerprint([SYSTEM, Q1]), answer_fingerprint("Sydney."))
    a2 = {"role": "assistant", "content": "Canberra."}
    second = Turn(conv, 1, "frontier", prompt_fingerprint([SYSTEM, Q1, A1, Q2]), answer_fingerprint("Canberra."))
    # The next user turn judges the answer before it, whoever serves the new turn.
    got = judge([SYSTEM, Q1, A1, Q2], [first])
    assert got == Judgement(first, False)
    got = judge([SYSTEM, Q1, A1, Q2, a2, {"role": "user", "content": "thanks"}], [first, second])
    assert got == Judgement(second, False)
    # A regenerate blames the answer it replaces (the latest answer to that prompt).
    again = Turn(conv, 0, "frontier", first.prompt_fingerprint, answer_fingerprint("Perth."))
    assert judge([SYSTEM, Q1], [first, again]) == Judgement(again, True)
    assert judge([SYSTEM, Q1, A1, Q2], [first, second]) == Judgement(second, True)
    # An answer the proxy did not give judges nothing: a client cannot blame a deployment for it.
    forged = {"role": "assistant", "content": "Something no deployment said."}
    assert judge([SYSTEM, Q1, forged, Q2], [first]) is None
    assert judge([SYSTEM, Q1], []) is None  # a first turn
    assert judge([], [first]) is None


def test_a_turn_record_is_small_and_plain():
    turn = Turn("c:" + "0" * 32, 3, "gpt-4o-eu", prompt_fingerprint([Q1]), answer_fingerprint("Sydney."))
    assert len(turn.prompt_fingerprint) == len(turn.answer_fingerprint) == 32
    with pytest.raises(AttributeError):
        turn.turn_index = 4  # frozen: stored as it was answered


# -- the policy section ------------------------------------------------------------------------

def test_the_shipped_policy_holds_every_kind_and_language():
    policy = load_policy()
    assert set(type(policy.signals.weights).model_fields) == set(WEIGHTED_KINDS)
    assert set(LANGUAGES) <= set(policy.signals.lexicons)
    for lang in LANGUAGES:
        lexicon = policy.signals.lexicons[lang]
        for category in ("correction", "dissatisfaction", "satisfaction", "neutral", "refusal"):
            assert getattr(lexicon, category), f"{lang}.{category} is empty"
    assert all(-1 <= w <= 1 for w in policy.signals.weights.model_dump().values())


def test_a_team_file_extends_overrides_and_removes_entries(tmp_path):
    team = tmp_path / "team.yaml"
    team.write_text(
        "version: 1\n"
        "signals:\n"
        "  weights:\n"
        "    satisfaction: 0.5\n"
        "  lexicons:\n"
        "    en:\n"
        "      correction:\n"
        "        house_style: '\\bthat is bogus\\b'\n"   # a new entry
        "        youre_wrong: '\\byou blundered\\b'\n"   # replaces the shipped entry of that name
        "      satisfaction:\n"
        "        thanks: null\n"                         # removes the shipped entry
        "    nl:\n"
        "      correction:\n"
        "        klopt_niet: '\\bdat klopt niet\\b'\n", encoding="utf-8")
    policy = load_policy(team)
    r = SignalReader(policy.signals)
    assert policy.signals.weights.satisfaction == 0.5
    assert kinds(r, "that is bogus") == {CORRECTION}
    assert kinds(r, "you blundered") == {CORRECTION}
    assert kinds(r, "you're wrong") == set()
    assert kinds(r, "thanks") == set()
    assert kinds(r, "thanks, that works") == {SATISFACTION}  # the other entries stay
    assert [(s.language, s.entry) for s in r.read_followup("Dat klopt niet.")] == [("nl", "klopt_niet")]
    assert kinds(r, "c'est faux") == {CORRECTION}  # the shipped languages stay


@pytest.mark.parametrize("entry,message", [
    ("'(\\w+) \\1'", "backreference \\1 is not supported"),
    ("'(?<!not )wrong'", "lookbehind"),
    ("'x*'", "matches the empty string"),
    ("'\\b'", "matches the empty string"),
])
def test_a_bad_lexicon_entry_is_reported_at_its_line(tmp_path, entry, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nsignals:\n  lexicons:\n    fr:\n      correction:\n"
                   f"        mine: {entry}\n", encoding="utf-8")
    with pytest.raises(PolicyError) as err:
        load_policy(bad)
    issues = [i for i in err.value.issues if i.path == "signals.lexicons.fr.correction.mine"]
    assert issues, str(err.value)
    assert issues[0].file == str(bad) and issues[0].line == 6 and issues[0].column > 1
    assert message in issues[0].message


def test_a_malformed_signals_section_is_reported_field_by_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nsignals:\n  lead_chars: 0\n  weights:\n    correction: -2\n    refusl: -1\n"
                   "  lexicons:\n    EN: {}\n    fr:\n      corrections: {}\n      neutral:\n        x: 3\n",
                   encoding="utf-8")
    with pytest.raises(PolicyError) as err:
        load_policy(bad)
    found = {(i.path, i.line) for i in err.value.issues}
    assert ("signals.lead_chars", 3) in found
    assert ("signals.weights.correction", 5) in found
    assert ("signals.weights.refusl", 6) in found
    assert ("signals.lexicons.EN", 8) in found
    assert ("signals.lexicons.fr.corrections", 10) in found
    assert ("signals.lexicons.fr.neutral.x", 12) in found


def test_aisia_validate_accepts_the_shipped_policies_and_rejects_a_bad_section(tmp_path, aisia):
    code, out, err = aisia("validate")
    assert code == 0, out + err
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nsignals:\n  weights:\n    correction: 7\n", encoding="utf-8")
    code, out, err = aisia("validate", bad)
    assert code != 0
    assert f"{bad}:4:17: signals.weights.correction: value 7 is out of range: must be <= 1" in out + err


# -- RE2 only, bounded input --------------------------------------------------------------------

def test_matching_is_re2_in_time_linear_in_the_bytes_read(tmp_path):
    # A pattern that makes a backtracking engine take exponential time: RE2 accepts it and reads
    # a long adversarial message in one pass (a backtracking engine would not return here).
    team = tmp_path / "team.yaml"
    team.write_text("version: 1\nsignals:\n  max_scan_chars: 200000\n"
                    "  lexicons:\n    en:\n      correction:\n        evil: '(?:a+)+b'\n"
                    "      neutral:\n        evil_mask: '(?:x+x+)+y'\n", encoding="utf-8")
    r = SignalReader(load_policy(team).signals)
    assert r.read_followup("a" * 100_000) == ()
    assert r.read_followup("x" * 100_000) == ()
    assert {s.entry for s in r.read_followup("a" * 1000 + "b")} == {"evil"}
    # The shipped reader reads at most max_scan_chars of a message.
    shipped = default_signal_reader()
    assert len(shipped.followup_text("word " * 200_000)) <= shipped.max_scan_chars + 1


def test_the_core_imports_neither_litellm_nor_the_policy_loader():
    code = ("import sys, aisia_plugin.signals, aisia_plugin.conversation; print(sorted(m for m in "
            "('litellm', 'yaml', 'jsonschema', 'aisia_plugin.policy.loader') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == "[]"


# -- the labelled set and the precision floor ---------------------------------------------------

@pytest.fixture(scope="module")
def items():
    return load_items()


def test_the_labelled_set_covers_every_language_and_kind(items):
    for lang in LANGUAGES:
        assert sum(i["lang"] == lang for i in items) >= 60, lang
        user = [i for i in items if i["lang"] == lang and i["source"] == "user"]
        assert any(not i["kinds"] for i in user), f"{lang}: no neutral new question"
    labelled = {k for i in items for k in i["kinds"]}
    assert labelled == set(KINDS)
    assert 0 < sum(map(held_out, items)) < len(items)


def test_negative_signal_precision_floor_in_every_language(reader, items):
    """Issue 40, acceptance 2: a lexicon edit that lowers the negative-signal precision (correction
    or dissatisfaction) of any language below the floor on the labelled set fails here."""
    report = evaluate(reader, items)
    for lang in LANGUAGES:
        count = report.get(NEGATIVE, lang)
        assert count.tp >= 20, f"{lang}: too few negative signals found to measure precision ({count.as_dict()})"
        assert count.precision >= PRECISION_FLOOR, f"{lang}: {count.as_dict()}"


def test_the_report_script_writes_its_tables(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from signal_precision import main as report

    assert report(["--no-write"]) == 0
    out = capsys.readouterr().out
    assert "## Held-out third" in out and "| **negative** (correction or dissatisfaction) |" in out


def test_similarity_is_the_dice_coefficient_of_string_trigrams():
    # The shingles are kept as tuples of characters: the same counts as the strings they spell.
    def reference(a, b, max_chars=4000):
        def grams(text):
            flat = " " + " ".join(_NOT_ALNUM.sub(" ", text[:max_chars].casefold()).split()) + " "
            return {flat[i:i + 3] for i in range(len(flat) - 2)} - {"   "}
        sa, sb = grams(a), grams(b)
        return 2 * len(sa & sb) / (len(sa) + len(sb)) if sa and sb else 0.0

    texts = ["", "   ", "a", "ab", "That's wrong, try again.", "that is WRONG -- try again!", "Straße naïve été",
             "STRASSE naive ete", "日本語のテキスト 🙂", "x_y x y", "one two three four five six seven eight"]
    for a in texts:
        for b in texts:
            assert similarity(a, b) == reference(a, b), (a, b)
            assert similarity(a, b, 7) == reference(a, b, 7), (a, b)


@pytest.mark.parametrize("item", [i for i in load_items() if i.get("batch") == "review-1"], ids=lambda i: i["text"][:40])
def test_what_a_review_found_read_as_a_complaint_reads_none(item):
    # Agreement opening with "no", a mention between single quotes, reported speech, a question
    # about usage: each was read as a correction or a dissatisfaction before the third round.
    kinds = {s.kind for s in default_signal_reader().read_followup(item["text"])}
    assert not kinds & {CORRECTION, DISSATISFACTION}, kinds
