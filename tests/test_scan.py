"""The one-pass prompt scan (scan.PromptScanner) against its reference: features.extract_features
and DomainDetector.detect, each with its own scans. Same features and same domain on real
prompts (RouterArena, when ../shared/data is beside the checkout), on generated keyword soups
and on hostile inputs; and DomainDetector.detect(text, present) == detect(text)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisia_plugin.domains import DomainDetector
from aisia_plugin.features import extract_features
from aisia_plugin.policy import load_policy
from aisia_plugin.scan import PromptScanner

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
POLICY = load_policy()
DETECTOR = DomainDetector(POLICY.domains)
SCANNER = PromptScanner(DETECTOR, POLICY.domains.max_scan_chars)
MAX = POLICY.domains.max_scan_chars

# Words that trigger features and domains, so that generated texts mix several of them.
WORDS = ("math equation integral theorem calculate how many percent python code debug function class "
         "traceback translate traduire translation patient diagnosis symptoms stock portfolio interest "
         "court contract law plaintiff prove step by step image photo transcribe audio sentiment classify "
         "poem story quickly urgent review document plan analyze é ñ x^2 ``` def return ( ) { } = ==").split()


def reference(messages):
    feats = extract_features(messages, max_chars=MAX)
    return feats, DETECTOR.detect(feats.text)


def check(messages):
    feats, domain = SCANNER.features_and_domain(messages)
    want_feats, want_domain = reference(messages)
    assert feats == want_feats
    assert domain == want_domain
    # The detector given the domains present answers as it does alone.
    _, present = SCANNER.scan(messages)
    assert DETECTOR.detect(feats.text, present) == DETECTOR.detect(feats.text)


@settings(max_examples=400, deadline=None)
@given(words=st.lists(st.sampled_from(WORDS), max_size=80), seps=st.sampled_from([" ", "\n", ", ", ""]))
def test_one_pass_matches_the_separate_scans_on_keyword_soups(words, seps):
    check([{"role": "user", "content": seps.join(words)}])


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300))
def test_one_pass_matches_the_separate_scans_on_any_text(text):
    check([{"role": "system", "content": "be brief"}, {"role": "user", "content": text}])


def test_one_pass_on_hostile_and_odd_inputs():
    long = ("calculate the integral " * 2000) + ("translate this contract " * 2000)
    for messages in ([], None, [{"role": "user", "content": long}], [{"role": "user", "content": "\ud800 math proof"}],
                     [{"role": "user", "content": [{"type": "text", "text": "debug this python"}, {"type": "image_url"}]}],
                     [{"role": "user", "content": "(" * 5000 + "a" * 5000}], [42, {"content": None}]):
        check(messages)


def _routerarena_prompts(limit: int = 400) -> list[str]:
    files = sorted(DATA.glob("routerarena_*.jsonl")) if DATA.is_dir() else []
    if not files:
        return []
    out = []
    for line in files[0].read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        p = row.get("prompt") or row.get("question")
        if isinstance(p, str) and p.strip():
            out.append(p)
    return out[:: max(1, len(out) // limit)]


@pytest.mark.skipif(not _routerarena_prompts(), reason="../shared/data is not beside the checkout")
def test_one_pass_matches_the_separate_scans_on_real_prompts():
    prompts = _routerarena_prompts()
    rnd = random.Random(5)
    # Alone, and two or three concatenated (several domains in one text, as in a long conversation).
    texts = prompts + ["\n".join(rnd.sample(prompts, rnd.randint(2, 3))) for _ in range(200)]
    seen = set()
    for text in texts:
        check([{"role": "user", "content": text}])
        seen.add(len(SCANNER.scan([{"role": "user", "content": text}])[1]))
    assert {0, 1} <= seen and max(seen) >= 2  # the three paths of detect(text, present) ran
