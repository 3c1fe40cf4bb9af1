"""Domain detection: the shipped patterns (FR + EN), scoring rules, and hostile input."""

import textwrap

import pytest
from hypothesis import given, settings, strategies as st

from aisia_plugin.domains import DomainDetector
from aisia_plugin.policy import default_domain_detector, detect_domain, load_policy

EXAMPLES = {
    "math": ["Calcule la dérivée de x^2", "Solve the quadratic equation x^2 - 5x + 6 = 0 and compute the derivative"],
    "coding": ["Écris une fonction Python qui inverse une liste", "Write a Python function that parses JSON"],
    "reasoning": ["Explique pourquoi ce raisonnement est valide, étape par étape",
                  "Use a truth table to check whether this argument is valid: do the premises entail the conclusion of the argument?"],
    "image": ["Génère une image d'un chat sur la lune", "Generate an image of a lighthouse at sunset"],
    "voice": ["Lis ce texte à voix haute avec une voix douce", "Convert this paragraph with text to speech"],
    "transcription": ["Transcris cet enregistrement audio de la réunion", "Please transcribe the audio of this interview"],
    "translation": ["Traduis ce texte en anglais", "Translate this paragraph into German."],
    "vision": ["Décris cette image en détail", "What is in this image? Run OCR on the text"],
    "embedding": ["Calcule les embeddings de ces phrases pour une recherche sémantique",
                  "Compute embeddings for semantic search with cosine similarity"],
    "medical": ["Quels sont les symptômes de cette maladie chez un patient âgé ?",
                "What are the symptoms of diabetes and how is it diagnosed in a patient?"],
    "finance": ["Analyse le portefeuille et les dividendes de cette action en bourse",
                "Estimate the EBITDA and cash flow of this company for investors"],
    "science": ["Explique la physique quantique et le rôle des électrons",
                "Explain how photosynthesis works in plant cells and the role of carbon dioxide molecules"],
    "classification": ["Classifie ces emails : spam ou non", "Classify these support tickets into categories"],
    "sentiment": ["Ce commentaire est-il positif ou négatif ? Fais l'analyse de sentiment",
                  "Run sentiment analysis on these customer reviews"],
    "legal": ["Ce contrat respecte-t-il le RGPD ? Donne un avis juridique",
              "Is this contract clause enforceable under GDPR? The plaintiff claims a breach"],
}
ORDER = ["math", "coding", "reasoning", "image", "voice", "transcription", "translation", "vision", "embedding",
         "medical", "finance", "science", "classification", "sentiment", "legal"]


def test_shipped_policy_has_the_15_domains_in_order():
    assert list(load_policy().domains.definitions) == ORDER


@pytest.mark.parametrize("domain,lang", [(d, i) for d in EXAMPLES for i in (0, 1)],
                         ids=[f"{d}-{'fr' if i == 0 else 'en'}" for d in EXAMPLES for i in (0, 1)])
def test_each_domain_french_and_english(domain, lang):
    assert detect_domain(EXAMPLES[domain][lang]) == domain


@pytest.mark.parametrize("text", ["", "Bonjour, comment vas-tu ?", "What's the weather like today?", "Tell me a joke",
                                  "The class of 2020 met in the cafe."])
def test_none_when_nothing_matches(text):
    assert detect_domain(text) is None


def test_non_str_input():
    for odd in (None, 3, b"calcule la derivee", ["x"]):
        assert detect_domain(odd) is None
        assert default_domain_detector().scores(odd) == {}


def _detector(tmp_path, body: str) -> DomainDetector:
    path = tmp_path / "domains.yaml"
    # Not layered over the shipped domains: these tests are about the order and counts of their own.
    path.write_text("version: 1\ndefaults: false\naliases: {auto: {strategy: ucb1}}\ndomains:\n"
                    + textwrap.indent(textwrap.dedent(body), "  "), encoding="utf-8")
    return DomainDetector(load_policy([path]).domains)


def test_tie_goes_to_first_domain_in_policy_order(tmp_path):
    det = _detector(tmp_path, """
        definitions:
          beta: {patterns: ['\\bapple\\b']}
          alpha: {patterns: ['\\bpear\\b']}
    """)
    assert det.scores("apple pear") == {"beta": 1.0, "alpha": 1.0}
    assert det.detect("apple pear") == "beta"
    assert det.detect("pear apple") == "beta"  # order of the policy, not of the text
    assert det.detect("pear pear apple") == "alpha"


def test_counts_weights_and_min_matches(tmp_path):
    det = _detector(tmp_path, """
        min_matches: 3
        definitions:
          fruit: {patterns: ['\\bapple\\b', 'pear'], weight: 1}
          heavy: {patterns: ['\\bstone\\b'], weight: 2.5}
    """)
    assert det.scores("apple pear apple") == {"fruit": 3.0}
    assert det.detect("apple pear apple") == "fruit"
    assert det.detect("apple pear") is None            # 2 < min_matches
    assert det.scores("stone") == {"heavy": 2.5}
    assert det.detect("stone") is None                 # 2.5 < 3
    assert det.detect("stone stone apple") == "heavy"  # 5.0


def test_disabled_and_max_scan_chars(tmp_path):
    off = _detector(tmp_path, """
        enabled: false
        definitions:
          fruit: {patterns: ['apple']}
    """)
    assert off.detect("apple apple") is None and off.scores("apple") == {}
    short = _detector(tmp_path, """
        max_scan_chars: 100
        definitions:
          fruit: {patterns: ['apple']}
    """)
    middle = "x" * 200 + " apple " + "x" * 200
    assert short.detect(middle) is None                 # only the first and last 50 chars are scanned
    assert short.detect("apple " + "x" * 400) == "fruit"
    assert short.detect("x" * 400 + " apple") == "fruit"
    assert short.scores("apple" + "x" * 90 + "apple" + "x" * 400 + "apple") == {"fruit": 2.0}


def test_user_capture_groups_and_empty_matches(tmp_path):
    det = _detector(tmp_path, """
        definitions:
          first: {patterns: ['(a)(b)?c', 'x*']}
          second: {patterns: ['(d)e']}
    """)
    # x* matches the empty string everywhere: it is ignored rather than shadowing "(d)e"
    assert det.scores("ac abc de de zzz xxx") == {"first": 2.0, "second": 2.0}
    assert det.detect("ac de de") == "second"


def test_accented_words_are_matched():
    assert detect_domain("Résous l'équation et calcule l'intégrale") == "math"
    assert detect_domain("ÉCRIS UNE FONCTION PYTHON") == "coding"


def test_one_megabyte_adversarial_input_completes():
    det = default_domain_detector()
    for text in ("a" * 10**6 + "!", "calcul " * 150_000, "é" * 10**6, "\ud800" * 1000 + "traduis en anglais"):
        result = det.detect(text)
        assert result is None or result in ORDER
    assert det.detect("traduis " * 200_000) == "translation"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=3000))
def test_detect_never_raises(text):
    assert detect_domain(text) in {None, *ORDER}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["calcule", "dérivée", "python", "traduis", "en anglais", "patient", " ", "\n",
                                 "é", "x^2", "the court", "spam", "!", "```"]), max_size=60).map("".join))
def test_detect_never_raises_on_keyword_soup(text):
    det = default_domain_detector()
    scores = det.scores(text)
    assert set(scores) <= set(ORDER) and all(v > 0 for v in scores.values())
    assert det.detect(text) in {None, *ORDER}


# -- the counting method (see the module docstring of aisia_plugin.domains) ------------------

from types import SimpleNamespace  # noqa: E402


def _section(definitions: dict, min_matches: int = 2, max_scan_chars: int = 8000, enabled: bool = True,
             densities: dict | None = None):
    """A domains section without the policy loader (the detector reads only these fields)."""
    densities = densities or {}
    return SimpleNamespace(enabled=enabled, min_matches=min_matches, max_scan_chars=max_scan_chars,
                           definitions={n: SimpleNamespace(patterns=p, weight=w, min_density=densities.get(n, 0))
                                        for n, (p, w) in definitions.items()})


def _reference(det: DomainDetector, text) -> str | None:
    """detect() as the full count defines it: the first best score, if it reaches min_matches and
    the domain's min_density per full 1,000 characters as scanned (at most max_scan_chars)."""
    scores = det.scores(text)
    if not scores:
        return None
    best = max(scores, key=scores.__getitem__)
    scanned = len(text) if len(text) <= det.max_scan_chars else 2 * (det.max_scan_chars // 2) + 1
    density = dict(zip(det.names, det.densities))[best]
    return best if scores[best] >= max(det.min_matches, density * (scanned // 1000)) else None


def test_a_word_matched_by_two_domains_counts_for_the_first_only():
    det = DomainDetector(_section({"fruit": ([r"\bapple\b"], 1), "company": ([r"\bapple\b", r"\biphone\b"], 1)},
                                  min_matches=1))
    assert det.counts("apple apple iphone") == [2, 1]
    assert det.detect("apple apple iphone") == "fruit"
    # leftmost-first: the longer match of a later domain does not take the occurrence
    det = DomainDetector(_section({"a": ([r"\bnew\b"], 1), "b": ([r"\bnew york\b"], 1)}, min_matches=1))
    assert det.counts("new york new york") == [2, 0]
    det = DomainDetector(_section({"b": ([r"\bnew york\b"], 1), "a": ([r"\bnew\b"], 1)}, min_matches=1))
    assert det.counts("new york new") == [1, 1]


def test_empty_matching_patterns_are_left_out_whatever_their_context():
    # [a-z0-9]|\b$ matches the empty string only at the end of a word ending the text
    det = DomainDetector(_section({"odd": ([r"[a-z0-9]|\b$", r"(?m)^$", r"\B"], 1), "word": ([r"\bcat\b"], 1)},
                                  min_matches=1))
    assert det.counts("a cat\n\nbb") == [0, 1]
    assert det.detect("xyz") is None


def test_single_domain_answers_are_those_of_the_full_count():
    det = DomainDetector(_section({"fruit": ([r"\bapple\b", r"\bpear\b"], 1), "task": ([r"\btranslate\b"], 4)}))
    assert det.detect("apple") is None and det.counts("apple") == [1, 0]       # 1 < min_matches
    assert det.detect("an apple and a pear") == "fruit"                          # the 2nd decides
    assert det.detect("translate") == "task"                                     # 4 >= 2 at once
    assert det.detect("pear " * 500) == "fruit" and det.counts("pear " * 500) == [500, 0]
    high = DomainDetector(_section({"fruit": ([r"\bapple\b"], 1)}, min_matches=5))
    assert high.detect("apple " * 4) is None
    assert high.detect("apple " * 5) == "fruit"
    assert high.detect("apple" + " x" * 3000 + " apple" * 4) == "fruit"


def test_a_domain_alone_after_the_first_occurrence_must_beat_it():
    det = DomainDetector(_section({"heavy": ([r"\bstone\b"], 3), "light": ([r"\bfeather\b"], 1)}, min_matches=1))
    assert det.detect("stone feather feather") == "heavy"           # 3 > 2
    assert det.detect("stone feather feather feather") == "heavy"   # 3 == 3: the first in policy order
    assert det.detect("stone" + " feather" * 4) == "light"          # 4 > 3
    det = DomainDetector(_section({"light": ([r"\bfeather\b"], 1), "heavy": ([r"\bstone\b"], 3)}, min_matches=1))
    assert det.detect("stone feather feather feather") == "light"   # the tie goes to light now
    assert det.detect("stone feather feather") == "heavy"


def test_min_density_asks_more_of_a_long_text():
    det = DomainDetector(_section({"fruit": ([r"\bapple\b", r"\bpear\b"], 1), "task": ([r"\btranslate\b"], 4)},
                                  densities={"fruit": 1}))
    assert det.detect("an apple and a pear") == "fruit"            # 2 >= max(2, 1 * 0)
    assert det.detect("an apple and a pear" + "." * 2500) == "fruit"  # 2 >= 1 * 2 (2519 characters)
    story = "apple pear " + "and then the story went on. " * 150  # 4211 characters: 4 needed
    assert det.scores(story) == {"fruit": 2.0} and det.detect(story) is None
    assert det.detect("apple " + story) is None                     # 3 < 4
    assert det.detect("apple " * 2 + story) == "fruit"              # 4 >= 4
    assert det.detect("translate " + story) == "task"               # no min_density: min_matches only
    # the text is scanned up to max_scan_chars: a longer one asks no more than that many characters
    short = DomainDetector(_section({"fruit": ([r"\bapple\b"], 1)}, max_scan_chars=1000, densities={"fruit": 3}))
    assert short.detect("apple apple apple " + "x " * 2500) == "fruit"  # 3 >= 3 * 1 (1001 scanned), not 3 * 5

    det = DomainDetector(_section({"item": ([r"(?m)^item\b"], 1), "end": ([r"\bstop$"], 1)}, min_matches=1))
    assert det.counts("item x item\nitem") == [2, 0]
    assert det.counts("x item") == [0, 0]
    assert det.counts("stop stop") == [0, 1]
    assert det.detect("stop") == "end" and det.detect("item") == "item"
    # the same bytes in another context are not taken for the memoised occurrence
    det = DomainDetector(_section({"a": ([r"foo\b"], 1), "b": ([r"foo"], 1)}, min_matches=1))
    for _ in range(2):
        assert det.counts("foo bar") == [1, 0]
        assert det.counts("foobar") == [0, 1]
        assert det.counts("a foo") == [1, 0] and det.counts("a foob") == [0, 1]


def test_keyword_dense_prompt():
    para = ("I have a Python service that calls an HTTP API and parses the JSON response into dataclasses. "
            "Sometimes the function raises a KeyError deep inside the parser and the stack trace is hard "
            "to read. Can you help me debug it, suggest a cleaner class design, and write a pytest test "
            "that reproduces the failure with a fixture? Here is the relevant part of the code:\n"
            "def parse(payload):\n    items = payload['data']['items']\n    return [Item(**x) for x in items]\n")
    text = (para * 6)[:2048]
    det = default_domain_detector()
    assert det.detect(text) == "coding" == _reference(det, text)
    assert det.counts(text)[ORDER.index("coding")] >= 30


_VOCABULARY = ["apple", "pear", "stone", "feather", "new york", "new", "york", "translate", "foo", "foobar",
               "item", "\nitem", "stop", "é", " ", " ", "\n", "x", "applepear", "pear-apple", " " + "-" * 400 + " "]
_POLICIES = [
    _section({"fruit": ([r"\bapple\b", r"pear"], 1), "heavy": ([r"\bstone\b", r"\bfoo"], 3)},
             min_matches=1, max_scan_chars=2600, densities={"fruit": 1, "heavy": 0.5}),
    _section({"fruit": ([r"\bapple\b", r"pear"], 1), "heavy": ([r"\bstone\b", r"\bfoo"], 3),
              "city": ([r"\bnew york\b", r"york"], 1), "task": ([r"\btranslate\b"], 4)}),
    _section({"city": ([r"\bnew\b"], 2), "fruit": ([r"apple|pear"], 1), "end": ([r"\bstop$", r"(?m)^item"], 1.5)},
             min_matches=3),
    _section({"a": ([r"foo\b", r"\bx\b"], 1), "b": ([r"foo", r"feather"], 1), "c": ([r"é|\bitem"], 2)},
             min_matches=1),
    _section({"only": ([r"\b(?:apple|pear|stone)\b"], 0.5)}, min_matches=2),
]
_DETECTORS = [DomainDetector(p) for p in _POLICIES]


@settings(max_examples=400, deadline=None)
@given(st.integers(0, len(_POLICIES) - 1), st.lists(st.sampled_from(_VOCABULARY), max_size=40).map("".join))
def test_detect_is_the_best_of_the_full_count(which, text):
    det = _DETECTORS[which]
    assert det.detect(text) == _reference(det, text)


def test_detect_is_the_best_of_the_full_count_on_the_shipped_policy():
    det = default_domain_detector()
    texts = [t for pair in EXAMPLES.values() for t in pair]
    texts += ["Please solve the following mathematical problem step by step. " + t for t in texts]
    texts += [" ".join(texts[i:i + 5]) for i in range(0, len(texts), 3)]
    for text in texts:
        assert det.detect(text) == _reference(det, text)


# -- issue 11, finding 10 -------------------------------------------------------------------------
@pytest.mark.parametrize("text,domain", [
    ("Write a Python function that sorts a list", "coding"),
    ("Write a function in Python", "coding"),
    ("Write a Python function that merges two sorted lists", "coding"),  # the README's example
    ("Ge\u0301ne\u0300re une image d'un chat", "image"),  # NFD: e + combining accents
    ("Gén\u200bère une image d'un chat", "image"),  # a zero-width space inside the word
    ("tra\u00adduis ce texte en anglais", "translation"),  # a soft hyphen
    ("\ufeffÉcris une fonction Python qui trie une liste", "coding"),
])
def test_words_inside_a_request_and_odd_unicode_are_seen(text, domain):
    assert detect_domain(text) == domain
    from aisia_plugin.engine import Engine

    engine = Engine(load_policy())
    d = engine.decide("auto", [{"role": "user", "content": text}], [])
    assert d.domain == domain


def test_the_format_characters_are_unicodes():
    import sys
    import unicodedata

    from aisia_plugin.features import FORMAT_RANGES

    listed = {c for a, b in FORMAT_RANGES for c in range(a, b + 1)}
    cf = {c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"}
    assert cf <= listed, f"Unicode {unicodedata.unidata_version} adds format characters: {sorted(cf - listed)[:10]}"


def test_a_long_request_phrase_is_resumed_after_its_first_word_only_when_short():
    from aisia_plugin.domains import _RESUME_SPAN, _resume

    data = b"write a python function now"
    assert _resume(data, 0, 23) == 6  # after "write "
    assert _resume(data, 8, 14) == 14  # one word ("python"): at its end
    long = b"x " * _RESUME_SPAN
    assert _resume(long, 0, len(long)) == len(long)
