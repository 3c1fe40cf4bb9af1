"""google-re2's private API, used through aisia_plugin/re2compat.py only: this fails loudly when
a google-re2 release changes what the router relies on."""

from __future__ import annotations

import re2

from aisia_plugin import re2compat


def test_anchored_and_unanchored_matches_at_a_position():
    opts = re2.Options()
    opts.never_capture = True
    match = re2compat.match_of(re2.compile(r"\bab+", opts))
    data = b"xx abbb ab"
    assert match(re2compat.UNANCHORED, data, 0, len(data)) == [(3, 7)]
    assert match(re2compat.UNANCHORED, data, 7, len(data)) == [(8, 10)]
    assert match(re2compat.ANCHOR_START, data, 0, len(data))[0][0] < 0
    assert match(re2compat.ANCHOR_BOTH, b"abb", 0, 3) == [(0, 3)]
    assert match(re2compat.UNANCHORED, memoryview(data)[3:], 0, 4) == [(0, 4)]


def test_a_native_set_with_a_memory_budget():
    opts = re2compat.Options()
    opts.case_sensitive = False
    opts.max_mem = 8 << 20
    rset = re2compat.Set(re2compat.UNANCHORED, opts)
    assert [rset.Add(p) for p in (b"apple", b"pear")] == [0, 1]
    assert rset.Add(b"(") < 0  # a bad pattern is refused, not raised
    assert rset.Compile() is True
    assert sorted(rset.Match(b"a PEAR and an Apple")) == [0, 1]
    assert rset.Match(b"nothing") == []


def test_the_public_search_sets_native_match():
    s = re2.Set.SearchSet(re2.Options())
    s.Add("cat")
    s.Add("dog")
    s.Compile()
    assert sorted(re2compat.set_match_of(s)(b"dog and cat")) == [0, 1]
