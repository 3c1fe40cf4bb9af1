"""The fast suite (`pytest -m "not proxy"`) stays fast without anyone watching it: tests/conftest.py
fails a test that starts a serving process without the `proxy` mark. Here, that it does."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import starts_a_server

TESTS = Path(__file__).resolve().parent


def test_what_counts_as_a_serving_process():
    venv = str(Path(sys.executable).parent)
    assert starts_a_server([f"{venv}/litellm", "--config", "c.yaml", "--port", "4000"])
    assert starts_a_server(["/usr/bin/redis-server", "--port", "6390"])
    assert starts_a_server(["chromium", "--headless"])
    assert starts_a_server([f"{venv}/aisia", "demo", "--port", "0"])
    assert starts_a_server([sys.executable, "-m", "aisia_plugin.demo.upstream", "--demo"])
    assert starts_a_server("redis-server --port 6390")  # shell=True
    assert not starts_a_server([f"{venv}/aisia", "validate", "policies/"])
    assert not starts_a_server(["git", "ls-files"])
    assert not starts_a_server([sys.executable, "-c", "print(1)"])


def test_a_test_that_starts_a_server_without_the_mark_fails_naming_it(tmp_path):
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    proxy: starts a serving process\n")
    (tmp_path / "test_inner.py").write_text(textwrap.dedent("""
        import multiprocessing
        import subprocess
        import sys
        from pathlib import Path

        def test_unmarked_redis():
            subprocess.run(["redis-server", "--version"], capture_output=True)

        def test_unmarked_demo():
            subprocess.Popen([str(Path(sys.executable).with_name("aisia")), "demo"])

        def test_unmarked_workers():
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                pool.map(abs, [1])

        def test_a_short_command_is_fine():
            assert subprocess.run([sys.executable, "-c", "print(2)"], capture_output=True, text=True).stdout == "2\\n"
    """))
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rf", str(tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = run.stdout
    assert run.returncode == 1, out
    for name in ("test_unmarked_redis", "test_unmarked_demo", "test_unmarked_workers"):
        assert f"test_inner.py::{name} starts " in out and "without the `proxy` mark" in out, out
    assert "3 failed, 1 passed" in out, out
