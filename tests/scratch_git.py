"""A git repository holding this checkout as it is now (uncommitted and new files included): what a
`git+...` URL or a pre-commit `repo:` names, on this machine only (install and pre-commit tests)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IDENTITY = ["-c", "user.name=test", "-c", "user.email=test@localhost"]


def git(*argv, cwd) -> str:
    run = subprocess.run(["git", *IDENTITY, *map(str, argv)], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"git {' '.join(map(str, argv))}: {run.stdout}{run.stderr}"
    return run.stdout


def snapshot_of_checkout(dest: Path) -> tuple[Path, str]:
    """(the repository, its commit SHA): the checkout's tracked files copied and committed."""
    for name in filter(None, git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT).split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    git("init", "-q", cwd=dest)
    git("add", "-A", cwd=dest)
    git("commit", "-q", "-m", "snapshot", cwd=dest)
    return dest, git("rev-parse", "HEAD", cwd=dest).strip()
