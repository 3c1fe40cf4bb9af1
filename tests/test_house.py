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
