"""Fixtures shared by the test modules: what needs pytest's machinery (captured output, a
temporary folder). Plain builders, usable at import time and inside hypothesis strategies (a
deployment, a routing context, an arm's history), are in helpers.py."""

from __future__ import annotations

import os
import shlex
import subprocess
import textwrap

import pytest

# Set before numpy is first imported (nothing imports it before this file). The fits the tests run
# (`aisia train`, the contextual model) are on small matrices, where OpenBLAS's thread pool only
# spins against the other processes of a shared machine: on two busy cores one holdout fit took
# 26 s instead of 5 s of a single thread. A value the caller set wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Set before LiteLLM is first imported: a test that imports LiteLLM's types directly (before
# aisia_plugin.litellm.costs sets it) made LiteLLM fetch its model cost map from GitHub in a
# background thread; the tests run offline.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from aisia_plugin.cli import main


# LiteLLM's process-wide callback lists: every Router adds its own methods to them (and a test's
# plugin or logger may stay), and LiteLLM refuses any callback past 100 ("would exceed
# MAX_CALLBACKS"). Left to grow over the suite, a later module's plugin was silently not called.
LITELLM_CALLBACK_LISTS = ("callbacks", "success_callback", "failure_callback", "input_callback", "service_callback",
                          "_async_success_callback", "_async_failure_callback", "_async_input_callback")


@pytest.fixture(autouse=True, scope="module")
def _litellm_callbacks_as_before():
    """Each test module leaves LiteLLM's callback lists as it found them (empty before LiteLLM's
    first import)."""
    import sys

    before = sys.modules.get("litellm")
    saved = {name: list(getattr(before, name, None) or ()) for name in LITELLM_CALLBACK_LISTS} if before else {}
    yield
    litellm = sys.modules.get("litellm")
    if litellm is None:
        return
    for name in LITELLM_CALLBACK_LISTS:
        current = getattr(litellm, name, None)
        if isinstance(current, list):
            current[:] = saved.get(name, [])


@pytest.fixture
def aisia(capsys):
    """Run the command line in this process: ``aisia("validate", path)`` is
    ``(exit status, standard output, standard error)``."""
    def run(*argv):
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def write_file(tmp_path):
    """``write_file(text, name="policy.yaml")``: a file of the temporary folder holding the text
    (dedented), as a Path."""
    def write(text: str, name: str = "policy.yaml"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


# A module that starts a proxy (its own module-scoped ``proxy`` fixture) gets these two clients
# of it: the real ``openai`` client with the master key, and an httpx client for the admin routes.
@pytest.fixture(scope="module")
def client(proxy):
    import openai

    return openai.OpenAI(base_url=proxy.base_url, api_key=proxy.master_key, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def admin(proxy):
    import httpx

    with httpx.Client(base_url=proxy.url, headers=proxy.headers, timeout=60) as c:
        yield c


# -- the fast suite: `pytest -m "not proxy"` ---------------------------------------------------------
# A test that starts a process which serves (a LiteLLM proxy, redis-server, Chromium, `aisia demo`,
# the simulated upstreams' command line, a pool of worker processes) is marked `proxy`: in its
# module (`pytestmark = pytest.mark.proxy`) or on the test. The mark cannot drift: a test without it
# that starts such a process fails here, naming the mark, in the whole suite as in the fast one.
# Short-lived commands (`aisia validate`, `git`, `python -c`) are not such processes.
SERVING_PROGRAMS = frozenset({"litellm", "redis-server", "chromium", "chromium-browser", "google-chrome"})
SERVING_MODULES = frozenset({"aisia_plugin.demo.upstream"})


# The fixtures that start such a process: a test using one (directly or through another fixture)
# is marked without saying so. `proxy` is the name every proxy-starting module gives its proxy (the
# `client` and `admin` fixtures above build on it); `redis_server` and `redis_module` are
# tests/redis_server.py's, `redis` the name the modules that start their own Redis give it.
PROCESS_FIXTURES = frozenset({"proxy", "redis", "redis_server", "redis_module"})


def pytest_collection_modifyitems(items):
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.proxy)


def starts_a_server(argv) -> bool:
    """Whether a command line (a list, or a string for ``shell=True``) starts a process that serves."""
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = shlex.split(os.fsdecode(argv))
    argv = [os.fsdecode(a) for a in argv]
    if not argv:
        return False
    program = os.path.basename(argv[0])
    if program in SERVING_PROGRAMS:
        return True
    if program == "aisia" and "demo" in argv[1:2]:
        return True
    return any(a == "-m" and b in SERVING_MODULES for a, b in zip(argv, argv[1:]))


def _unmarked(what: str, item) -> None:
    pytest.fail(f"{item.nodeid} starts {what} without the `proxy` mark: add `pytestmark = pytest.mark.proxy` "
                f"to its module (or @pytest.mark.proxy to the test), so that `pytest -m 'not proxy'` stays fast",
                pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """For a test without the `proxy` mark (its fixtures' set-up and tear-down included), starting a
    serving process or a pool of worker processes fails the test."""
    if item.get_closest_marker("proxy") is not None:
        yield
        return
    import multiprocessing.util

    execute_child = subprocess.Popen._execute_child
    spawnv_passfds = multiprocessing.util.spawnv_passfds

    def guarded_execute_child(self, args, *rest, **kw):
        if starts_a_server(args):
            _unmarked(f"`{args if isinstance(args, str) else ' '.join(map(os.fsdecode, args))}`", item)
        return execute_child(self, args, *rest, **kw)

    def guarded_spawnv_passfds(*args, **kw):
        _unmarked("worker processes (multiprocessing)", item)

    subprocess.Popen._execute_child = guarded_execute_child
    multiprocessing.util.spawnv_passfds = guarded_spawnv_passfds
    try:
        yield
    finally:
        subprocess.Popen._execute_child = execute_child
        multiprocessing.util.spawnv_passfds = spawnv_passfds
