"""request_vector (aisia_plugin/contextual.py) against its earlier reading, kept here as the
reference: the prefix sums of the polynomial over the prompt's bytes and the slots and values
filled in place by numpy. Both give the same vector bit for bit (the same int64 slots, float64
values and float32 weights) on prompts of every shape, and the same labels (feature_labels)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from aisia_plugin import contextual as cx
from aisia_plugin.features import RequestFeatures

# -- the reference: request_vector as it was before its words became a list -------------------
_WORD_BYTE = bytes(0 if c in cx._SEPARATORS else 1 for c in range(256))
_SHIFT = np.uint64(64 - cx.FEATURE_BITS)
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_BIGRAM = np.uint64(0xC2B2AE3D27D4EB4F)


def _reference_powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    pw, inv = [1] * n, [1] * n
    pinv = pow(cx._P, -1, 1 << 64)
    for k in range(1, n):
        pw[k] = (pw[k - 1] * cx._P) & cx._MASK64
        inv[k] = (inv[k - 1] * pinv) & cx._MASK64
    return np.array(pw, dtype=np.uint64), np.array(inv, dtype=np.uint64)


_POW, _INV = _reference_powers(cx.MAX_BYTES + 1)


def reference_spans(raw: bytes):
    flags = np.frombuffer(b"\0" + raw.translate(_WORD_BYTE) + b"\0", dtype=np.int8)
    edges = np.flatnonzero(np.diff(flags))[:2 * cx.MAX_WORDS]
    return np.frombuffer(raw, dtype=np.uint8), edges[0::2], edges[1::2]


def reference_hashes(b, starts, ends):
    n = int(ends[-1])
    prefix = np.zeros(n + 1, dtype=np.uint64)
    np.cumsum(b[:n] * _POW[:n], out=prefix[1:])
    h = np.take(prefix, ends)
    h -= np.take(prefix, starts)
    h *= np.take(_INV, starts)
    h *= _GOLD
    return h


def reference_vector(features, domain=None, task_type=None):
    """(idx, val, w32) as request_vector made them."""
    raw = cx._raw(cx._text_of(features))
    b, starts, ends = reference_spans(raw)
    nw = len(starts)
    names = cx.named_features(features, domain, task_type, nw, raw.count(b"\n") + 1)
    nd = len(names)
    dense = [cx.named_slot(n) for n in names]
    if not nw:
        val = np.full(nd, 1.0 / math.sqrt(nd))
        return np.array(dense, dtype=np.int64), val, cx._w32(val)
    hw = reference_hashes(b, starts, ends)
    nb = nw - 1
    idx = np.empty(nw + nb + nd, dtype=np.uint64)
    idx[:nw] = hw
    bg = idx[nw:nw + nb]
    np.multiply(hw[:-1], _BIGRAM, out=bg)
    bg += hw[1:]
    bg *= _GOLD
    idx[:nw + nb] >>= _SHIFT
    idx = idx.view(np.int64)
    idx[nw + nb:] = dense
    val = np.empty(nw + nb + nd)
    val[:nw] = 1.0 / math.sqrt(3.0 * nw)
    val[nw:nw + nb] = 1.0 / math.sqrt(3.0 * nb) if nb else 0.0
    val[nw + nb:] = 1.0 / math.sqrt(3.0 * nd)
    w = np.empty((2, len(val)), dtype=np.float32)
    w[0] = val
    np.multiply(val, val, out=w[1], casting="same_kind")
    return idx, val, w


def reference_labels(features, domain=None, task_type=None):
    raw = cx._raw(cx._text_of(features))
    _, starts, ends = reference_spans(raw)
    words = [raw[s:e].decode("utf-8", "replace") for s, e in zip(starts.tolist(), ends.tolist())]
    return (words + [f"{a} {b}" for a, b in zip(words, words[1:])]
            + cx.named_features(features, domain, task_type, len(words), raw.count(b"\n") + 1))


# -- the corpus ------------------------------------------------------------------------------------
def corpus() -> list[str]:
    """Prompts of every shape: empty, separators only, one word, several languages and scripts,
    code, 9, 128, 129 and 200 words, long words, long lines, bytes at MAX_BYTES cut inside a
    multi-byte letter, control bytes, and random mixtures."""
    r = random.Random(11)
    fixed = [
        "", " ", "\n\n\t", ".,;:!?", "word", "  Word  ", "x", "é", "naïve café", "Write a Python function that merges two sorted lists",
        "Écris une fonction Python qui trie une liste.", "Schreibe eine Funktion, die zwei Listen zusammenführt!",
        "写一个合并两个有序列表的函数", "Напиши функцию, которая сливает два списка", "関数を書いてください：リストをソート",
        "مرحبا بالعالم", "שלום עולם", "🙂 emoji 🚀 rocket 👍🏽", "def merge(a, b):\n    return sorted(a + b)\n",
        "```python\nfor i in range(10):\n    print(i ** 2)  # squares\n```", "SELECT * FROM users WHERE id = 42;",
        "a\x00b\x01c\x1cd\x1fe\x7ff", "tab\tseparated\tvalues\r\nand\x0bvertical\x0cfeed",
        "it's a dog's life -- don't; can't", "http://example.com/path?q=1&r=2#frag", "a-b_c~d",
        " ".join(["w"] * 128), " ".join(["w"] * 129), " ".join(f"word{i}" for i in range(200)),
        " ".join(f"w{i}" for i in range(127)) + " ", "z" * 9000, ("é" * 5000), ("ab " * 3000),
        "x" * 4095 + "é" * 3000, "line " * 20 + "\n" * 70, ("a very long line without a break " * 300),
        "\n".join(f"{i}. item number {i}" for i in range(90)), "UPPER lower MiXeD CaSe İstanbul ß ẞ",
    ]
    alphabet = "abcdefghijklmnopqrstuvwxyzéàü中文ж0123456789 \n\t.,;:!?()[]{}\"'_-@#"
    mixed = ["".join(r.choice(alphabet) for _ in range(r.choice((3, 40, 400, 2000, 9000)))) for _ in range(120)]
    return fixed + mixed


def _features(r: random.Random, text: str) -> RequestFeatures:
    return RequestFeatures(text=text, has_code=r.random() < 0.3, task_type=r.choice(("coding", "default", "math")))


def test_request_vector_is_the_reference_bit_for_bit():
    r = random.Random(7)
    for text in corpus():
        feats = _features(r, text)
        domain, task = r.choice((None, "coding", "legal")), r.choice((None, "analysis"))
        x = cx.request_vector(feats, domain, task)
        idx, val, w32 = reference_vector(feats, domain, task)
        assert x.idx.dtype == np.int64 and x.val.dtype == np.float64 and x.w32.dtype == np.float32, text[:40]
        assert x.idx.tobytes() == idx.tobytes() and x.val.tobytes() == val.tobytes(), text[:40]
        assert x.w32.shape == w32.shape and x.w32.tobytes() == w32.tobytes(), text[:40]
        assert x.w32.flags.c_contiguous and x.idx.flags.c_contiguous and x.val.flags.c_contiguous
        assert cx.feature_labels(feats, domain, task) == reference_labels(feats, domain, task), text[:40]


@pytest.mark.parametrize("text", ["Write a Python function that merges two sorted lists", "a b", "one"])
def test_a_conversation_reads_its_latest_turn_as_the_reference_does(text):
    feats = RequestFeatures(text="an earlier question entirely different. " + text, turn_chars=len(text))
    x = cx.request_vector(feats, "coding")
    idx, val, w32 = reference_vector(feats, "coding")
    assert (x.idx.tobytes(), x.val.tobytes(), x.w32.tobytes()) == (idx.tobytes(), val.tobytes(), w32.tobytes())
