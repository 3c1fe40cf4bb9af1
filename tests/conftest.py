"""Fixtures shared by the test modules: what needs pytest's machinery (captured output, a
temporary folder). Plain builders, usable at import time and inside hypothesis strategies (a
deployment, a routing context, an arm's history), are in helpers.py."""

from __future__ import annotations

import textwrap

import pytest

from aisia_plugin.cli import main


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
