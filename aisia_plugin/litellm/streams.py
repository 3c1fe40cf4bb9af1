"""How long a stream's client held it back: the time the proxy waited, between two chunks of the
provider's stream, for the client to take the ones it had (docs/design.md#a-stream-its-client-holds).

LiteLLM's time for a stream runs from the call's start to its last chunk, and the proxy pulls the
provider's chunks only as fast as it hands them on: once the buffers between the proxy and the
client are full, a client that reads slowly stretches that time as far as the proxy's timeout.
So the plugin times the provider's side of an alias's stream: ``watch`` wraps the source
LiteLLM's stream reads its chunks from (``_SOURCES``, open by the time the response headers are
sent) and adds up, on the attempt, every wait of ``STALL_S`` or more between handing a chunk on
and asking for the next. The proxy's own work on a chunk (LiteLLM's chunk building, the JSON, the
write) takes well under a millisecond; a wait on the client's reading lasts until the server's
write buffer has drained (asyncio's flow control, which uvicorn follows: writing pauses above
64 KiB buffered and resumes below 16 KiB, 48 KiB read by the client), so a client that reads
slowly shows as such waits, and one that reads in small sips can hide at most ``STALL_S`` per
48 KiB (about 240 tokens) of the stream. ``answer_time.held_by_client`` then decides what the
stream teaches.

An alias's stream only (the headers hook returns before this for any other request); a stream
whose source LiteLLM has not opened yet when the headers are sent, or that is no
``CustomStreamWrapper``, is not timed (its hold stays None: the length caps alone bound it);
tests/test_held_stream.py fails if a LiteLLM release moves the source."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

STALL_S = 0.05  # a wait between two chunks at least this long is the client's (see the docstring)


class Hold:
    """The seconds a stream's client held it back, added up as it is read."""

    __slots__ = ("seconds",)

    def __init__(self):
        self.seconds = 0.0


class _TimedSource:
    """The provider's chunk source of a stream, read through: each wait of ``STALL_S`` or more
    between returning a chunk and being asked for the next is added to `hold`. Anything else
    (``aclose``, ``close``, the response) is the source's own."""

    __slots__ = ("_source", "_chunks", "_hold", "_returned", "_clock")

    def __init__(self, source, hold: Hold, clock: Callable[[], float] = time.monotonic):
        self._source = source
        self._chunks = None
        self._hold = hold
        self._returned: Optional[float] = None
        self._clock = clock

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self._returned is not None:
            waited = self._clock() - self._returned
            if waited >= STALL_S:
                self._hold.seconds += waited
        if self._chunks is None:
            self._chunks = self._source.__aiter__()
        try:
            return await self._chunks.__anext__()
        finally:
            self._returned = self._clock()

    def __getattr__(self, name: str) -> Any:
        if name in _TimedSource.__slots__ or name.startswith("__"):  # (unset: a copy being made)
            raise AttributeError(name)
        return getattr(self._source, name)


# Where a LiteLLM stream reads its chunks from, the first found: the Router's stream (its
# FallbackStreamWrapper, router.py ``_acompletion_streaming_iterator``: its ``__anext__`` reads its
# generator over the deployment's stream, fallbacks included), else a CustomStreamWrapper's
# provider stream (streaming_handler.py ``__anext__``). LiteLLM 1.108.
_SOURCES = ("_async_generator", "completion_stream")


def watch(response, clock: Callable[[], float] = time.monotonic) -> Optional[Hold]:
    """Time `response`'s provider side (a LiteLLM stream, as the headers hook sees it): the Hold
    the reading adds up, or None when it cannot be timed (module docstring)."""
    stream = getattr(response, "inner", response)  # the Router's HiddenParamsAsyncIteratorWrapper
    if not hasattr(stream, "make_call"):  # (a CustomStreamWrapper's, read duck-typed)
        return None
    for name in _SOURCES:
        source = getattr(stream, name, None)
        if source is not None:
            if isinstance(source, _TimedSource) or not hasattr(source, "__aiter__"):
                return None
            hold = Hold()
            setattr(stream, name, _TimedSource(source, hold, clock))
            return hold
    return None
