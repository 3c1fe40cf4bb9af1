"""The three ways the README installs the plugin into an existing proxy environment, each from a
clean venv (no system site-packages) that already holds ``litellm[proxy]==1.108.7``: from the
checkout, from a built wheel, and from a repository URL (``git+file://`` of a scratch clone of
this checkout: the same pip path as ``git+https://``, on this machine only). After each, pip must
have kept that LiteLLM, installed the newest redis-py our range admits (not a downgrade of the 8.x
a proxy environment carries), and ``pip check`` must be clean. The wheel must carry the policies
and the schema: ``aisia validate`` run outside the checkout finds them.

Slow (pip installs into scratch venvs, LiteLLM's proxy dependencies once, copied per path): marked
``proxy`` so that the fast suite (``pytest -m "not proxy"``) leaves it out. The wheels come from
pip's configured indexes and its cache; nothing is downloaded that the machine does not hold."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from scratch_git import snapshot_of_checkout

pytestmark = pytest.mark.proxy

ROOT = Path(__file__).resolve().parents[1]
LITELLM = "1.108.7"
PIP_TIMEOUT = 1200


def _run(argv, cwd=None, timeout=PIP_TIMEOUT) -> subprocess.CompletedProcess:
    run = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert run.returncode == 0, f"{' '.join(map(str, argv))}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run


def _pip(venv: Path, *args) -> subprocess.CompletedProcess:
    return _run([venv / "bin" / "python", "-m", "pip", *args])


def _installed(venv: Path) -> dict[str, str]:
    listed = json.loads(_pip(venv, "list", "--format", "json").stdout)
    return {p["name"].lower().replace("_", "-"): p["version"] for p in listed}


def _redis_requirement() -> Requirement:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(Requirement(d) for d in deps if Requirement(d).name == "redis")


def _visible_redis_versions(venv: Path) -> list[Version]:
    out = _pip(venv, "index", "versions", "redis").stdout
    line = next(l for l in out.splitlines() if l.startswith("Available versions:"))
    return [Version(v.strip()) for v in line.split(":", 1)[1].split(",")]


@pytest.fixture(scope="module")
def proxy_venv(tmp_path_factory) -> Path:
    """A clean venv holding litellm[proxy]==1.108.7, built once; each test installs into a copy."""
    venv = tmp_path_factory.mktemp("base") / "venv"
    _run([sys.executable, "-m", "venv", venv])
    _pip(venv, "install", "-q", f"litellm[proxy]=={LITELLM}")
    return venv


@pytest.fixture
def venv(proxy_venv, tmp_path) -> Path:
    # A venv finds its site-packages from its own pyvenv.cfg, so a copy is a venv of its own.
    copy = tmp_path / "venv"
    shutil.copytree(proxy_venv, copy, symlinks=True)
    return copy


def _source(how: str, tmp_path: Path) -> str:
    if how == "checkout":
        return str(ROOT)
    if how == "wheel":
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "dist", ROOT])
        (wheel,) = (tmp_path / "dist").glob("aisia_plugin-*.whl")
        names = zipfile.ZipFile(wheel).namelist()
        assert "aisia_plugin/schemas/aisia-policy.schema.json" in names, names
        assert "aisia_plugin/policies/aliases.yaml" in names, names
        return str(wheel)
    # The bare URL form: pip 23's requirement parser refuses `name @ git+file:///...` (no host),
    # while `name @ git+https://host/...`, the README's form, and this one take the same VCS path.
    return f"git+file://{snapshot_of_checkout(tmp_path / 'repo')[0]}"


@pytest.mark.parametrize("how", ["checkout", "wheel", "repository-url"])
def test_install_beside_an_existing_litellm_proxy(how, venv, tmp_path):
    before = _installed(venv)
    assert before["litellm"] == LITELLM

    _pip(venv, "install", "-q", _source(how, tmp_path))

    after = _installed(venv)
    assert after["litellm"] == LITELLM, "pip changed the proxy's LiteLLM"
    assert after["aisia-plugin"] == "0.1.0"
    redis_range = _redis_requirement().specifier
    newest = max(v for v in _visible_redis_versions(venv) if v in redis_range and not v.is_prerelease)
    assert Version(after["redis"]) == newest, (after["redis"], str(redis_range))
    # the redis-py a current proxy environment carries (8.x) must be within the range, not downgraded
    assert newest.major >= 8, f"redis{redis_range} stops below redis-py 8"
    _pip(venv, "check")

    # Outside the checkout: the shipped policies and schema come from the installed package.
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    check = subprocess.run([venv / "bin" / "aisia", "validate"], cwd=outside, capture_output=True, text=True,
                           timeout=300, env={k: v for k, v in os.environ.items() if k != "AISIA_POLICY"})
    assert check.returncode == 0, check.stdout + check.stderr
    assert "ok" in check.stdout, check.stdout
    located = subprocess.run([venv / "bin" / "python", "-c", "import aisia_plugin.resources as r; print(r.schema_path())"],
                             cwd=outside, capture_output=True, text=True, timeout=120)
    assert located.stdout.startswith(str(venv)), located.stdout + located.stderr
