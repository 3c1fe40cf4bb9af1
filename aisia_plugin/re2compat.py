"""The one place that reaches into google-re2's private API: its pybind11 module ``re2._re2``
(``RE2.Anchor``, ``RE2.Options``, ``Set``) and the ``_regexp`` / ``_set`` attributes of its
Python wrappers. The public wrappers have no Set with a memory budget over bytes, no match
anchored at a position, and cost a Python frame per call on the request path. A google-re2
release that changes any of this breaks here, and tests/test_re2compat.py says so."""

from __future__ import annotations

import re2
from re2 import _re2

UNANCHORED = _re2.RE2.Anchor.UNANCHORED
ANCHOR_START = _re2.RE2.Anchor.ANCHOR_START
ANCHOR_BOTH = _re2.RE2.Anchor.ANCHOR_BOTH
Options = _re2.RE2.Options  # the native options (a Set takes these)
Set = _re2.Set  # Set(anchor, options): .Add(bytes) -> entry number or -1, .Compile() -> bool, .Match(buffer)


def match_of(compiled):
    """The native ``Match(anchor, buffer, pos, endpos) -> [(start, end), ...]`` of a
    ``re2.compile`` result: (-1, -1) for no match."""
    return compiled._regexp.Match


def set_match_of(search_set):
    """The native ``Match(buffer) -> [entry numbers]`` of a compiled ``re2.Set``."""
    return search_set._set.Match


def search_options(max_mem: int):
    """The options of a policy's patterns read on untrusted text (domains, signal lexicons):
    case-insensitive, no error logging, no submatch tracking (RE2's DFA alone), a memory budget."""
    opts = re2.Options()
    opts.case_sensitive = False
    opts.log_errors = False
    opts.never_capture = True
    opts.max_mem = max_mem
    return opts
