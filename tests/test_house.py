"""Rules of the house that no other test would notice breaking (issue 11, the house)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "aisia_plugin"


def _tracked_code() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "*.py", "*.lua", "*.toml", "*.cfg", "*.sh"], cwd=REPO,
                             capture_output=True, text=True, timeout=60, check=True).stdout.split()
        return [REPO / p for p in out if (REPO / p).is_file()]
    except (OSError, subprocess.SubprocessError):  # not a git checkout (an sdist): every file
        return [p for p in REPO.rglob("*") if p.suffix in (".py", ".lua", ".toml") and ".venv" not in p.parts]


def test_no_machine_local_paths_in_code():
    """A path of one machine (a work tree, a home, a temporary file) works there only."""
    local = re.compile(r"(?<![\w.])/(?:work|home|root|tmp)/\w")
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in _tracked_code()
             for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if local.search(line) and p.name != "test_house.py"]
    assert found == []


def test_the_wheel_carries_no_litellm_patching():
    """The LiteLLM baselines patch LiteLLM's modules at run time: they live with the benchmarks,
    outside the package the proxy imports."""
    assert (REPO / "benchmarks" / "litellm_baselines.py").is_file()
    offenders = [str(p.relative_to(REPO)) for p in PACKAGE.rglob("*.py")
                 if "litellm.router_strategy" in p.read_text(encoding="utf-8") or p.name == "litellm_baselines.py"]
    assert offenders == []


def test_the_readmes_test_command_is_what_ci_runs_and_installs_what_the_tests_need():
    # On a fresh machine the README's one command must be enough: the Redis tests need
    # redis-server, the routing page's test Chromium; .ci/run installs them, then runs pytest.
    readme = (REPO / "README.md").read_text()
    block = re.search(r"Install and run the tests.*?```bash\n(.*?)```", readme, re.S)
    assert block and block.group(1).strip() == "bash .ci/run"
    ci = (REPO / ".ci" / "run").read_text()
    for needed in ("redis-server", "chromium", ".venv/bin/pip install -q -e '.[test]'", ".venv/bin/python -m pytest"):
        assert needed in ci, needed
