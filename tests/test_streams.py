"""aisia_plugin/litellm/streams.py: the time a stream's client held it back, added up as it is read
(docs/design.md#a-stream-its-client-holds). A stream shaped as LiteLLM's (a ``make_call`` and its
chunk source), a clock the test moves."""

from __future__ import annotations

import asyncio

from aisia_plugin.litellm.streams import STALL_S, watch


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def chunks(n: int):
    for k in range(n):
        yield k


class Stream:
    """A CustomStreamWrapper's shape: its provider stream, read through ``completion_stream``."""

    make_call = None

    def __init__(self, source):
        self.completion_stream = source

    def __aiter__(self):
        return self

    async def __anext__(self):
        async for chunk in self.completion_stream:
            return chunk
        raise StopAsyncIteration


class RouterStream(Stream):
    """The Router's FallbackStreamWrapper's shape: it reads its own generator, not completion_stream."""

    def __init__(self, source):
        super().__init__(None)
        self._async_generator = source

    async def __anext__(self):
        return await self._async_generator.__anext__()


def read_with_waits(stream, clock: Clock, waits: list) -> list:
    """Read `stream` whole, the clock moved by `waits[k]` after the k-th chunk (the consumer's
    time with it: the proxy's work, the client's reading)."""

    async def read():
        out = []
        async for chunk in stream:
            out.append(chunk)
            clock.now += waits[len(out) - 1] if len(out) <= len(waits) else 0.0
        return out

    return asyncio.run(read())


def test_only_waits_of_the_stall_length_or_more_between_chunks_are_the_clients():
    for shape in (Stream, RouterStream):
        clock = Clock()
        stream = shape(chunks(5))
        hold = watch(stream, clock)
        assert hold is not None and watch(stream, clock) is None  # (timed once)
        got = read_with_waits(stream, clock, [0.001, STALL_S * 1.01, 2.0, STALL_S * 0.99, 0.0])
        assert got == [0, 1, 2, 3, 4]  # every chunk passed on, in order
        assert abs(hold.seconds - (STALL_S * 1.01 + 2.0)) < 1e-9, shape.__name__


def test_a_stream_that_cannot_be_timed_is_left_alone():
    assert watch(object()) is None  # no LiteLLM stream
    text = Stream("a cached answer")  # a source that is no async iterable
    assert watch(text) is None and text.completion_stream == "a cached answer"
    wrapped = type("HiddenParams", (), {})()
    wrapped.inner = Stream(chunks(1))  # the Router's HiddenParamsAsyncIteratorWrapper: its inner stream
    assert watch(wrapped) is not None
