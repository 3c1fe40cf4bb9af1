"""Domain detection: the shipped patterns (FR + EN), scoring rules, and hostile input."""

import textwrap

import pytest
from hypothesis import given, settings, strategies as st

from aisia_plugin.domains import DomainDetector, _default_detector, detect_domain
from aisia_plugin.policy import load_policy

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
        assert _default_detector().scores(odd) == {}


def _detector(tmp_path, body: str) -> DomainDetector:
    path = tmp_path / "domains.yaml"
    path.write_text("version: 1\ndomains:\n" + textwrap.indent(textwrap.dedent(body), "  "), encoding="utf-8")
    return DomainDetector(load_policy([path], known_strategies={"ucb1"}).domains)


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
    det = _default_detector()
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
    det = _default_detector()
    scores = det.scores(text)
    assert set(scores) <= set(ORDER) and all(v > 0 for v in scores.values())
    assert det.detect(text) in {None, *ORDER}
