"""The README's pre-commit snippet ("Validate in CI") as a project would use it: in a scratch git
repository, `repo:` naming a copy of this checkout (a local path: pre-commit clones it, nothing is
downloaded but the hook's dependencies from pip's configured indexes), `rev:` its commit SHA, then
a release tag. The hook passes a good policy, fails a bad one naming the file and line, and with
`--deployments` (the snippet's `args:`) fails an alias named like one of the config's models.

Slow (pre-commit builds the hook's environment, the plugin and LiteLLM): marked `proxy` so that
the fast suite leaves it out."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scratch_git import ROOT, git, snapshot_of_checkout

pytestmark = pytest.mark.proxy

PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
GOOD = """\
aliases:
  auto/team:
    description: the team's alias
    strategy: ucb1
    candidates:
      models: [gpt-4o-mini]
"""
CONFIG = """\
model_list:
  - model_name: gpt-4o-mini
    litellm_params: {model: openai/gpt-4o-mini}
  - model_name: llama3
    litellm_params: {model: ollama/llama3}
"""


def readme_snippet() -> str:
    """The README's .pre-commit-config.yaml block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(repos:\n.*?)```", text, re.S)
    assert len(blocks) == 1, blocks
    return blocks[0]


@pytest.fixture(scope="module")
def hooks_repo(tmp_path_factory):
    repo, sha = snapshot_of_checkout(tmp_path_factory.mktemp("hooks") / "aisia_plugin")
    git("tag", "v0.1.0", cwd=repo)
    return repo, sha


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory):
    return tmp_path_factory.mktemp("pre-commit-home")


def _project(tmp_path: Path, hooks_repo: Path, rev: str, policy: str, folder: str = "policies") -> Path:
    project = tmp_path / "project"
    (project / folder).mkdir(parents=True)
    config = readme_snippet().replace("https://<repository>", str(hooks_repo)).replace("<commit SHA>", rev)
    assert str(hooks_repo) in config and rev in config, config
    if folder != "policies":  # the snippet's files: line, set to where this project keeps its policies
        default = "files: (^|/)policies/.*\\.ya?ml$"
        assert default in config, config
        config = config.replace(default, f"files: ^{folder}/.*\\.ya?ml$")
    (project / ".pre-commit-config.yaml").write_text(config, encoding="utf-8")
    (project / "litellm_config.yaml").write_text(CONFIG, encoding="utf-8")
    (project / folder / "team.yaml").write_text(policy, encoding="utf-8")
    git("init", "-q", cwd=project)
    git("add", "-A", cwd=project)
    return project


def _run_hooks(project: Path, home: Path, changed: str = "policies/team.yaml") -> subprocess.CompletedProcess:
    env = {**os.environ, "PRE_COMMIT_HOME": str(home)}
    env.pop("AISIA_POLICY", None)
    return subprocess.run([PRE_COMMIT, "run", "--files", changed], cwd=project, env=env,
                          capture_output=True, text=True, timeout=1500)


def test_the_snippet_passes_a_good_policy_at_a_commit_sha(tmp_path, hooks_repo, pre_commit_home):
    repo, sha = hooks_repo
    run = _run_hooks(_project(tmp_path, repo, sha, GOOD), pre_commit_home)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"aisia validate \(routing policies\)\.+Passed", run.stdout), run.stdout


def test_the_snippet_fails_a_bad_policy_naming_the_line(tmp_path, hooks_repo, pre_commit_home):
    repo, sha = hooks_repo
    bad = GOOD.replace("    strategy: ucb1\n", "    strategy: ucb1\n    exploration: 7\n")
    run = _run_hooks(_project(tmp_path, repo, sha, bad), pre_commit_home)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Failed" in run.stdout
    assert "policies/team.yaml:5:18: aliases.auto/team.exploration: value 7 is out of range" in run.stdout, run.stdout


def test_the_snippet_s_deployments_catch_an_alias_named_like_a_model(tmp_path, hooks_repo, pre_commit_home):
    repo, sha = hooks_repo
    colliding = GOOD.replace("auto/team:", "gpt-4o-mini:")
    run = _run_hooks(_project(tmp_path, repo, sha, colliding), pre_commit_home)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "policies/team.yaml:2:3: aliases.gpt-4o-mini: the alias collides with the LiteLLM model_name " \
           "'gpt-4o-mini'" in run.stdout, run.stdout


def test_the_hook_works_at_a_tag(tmp_path, hooks_repo, pre_commit_home):
    repo, _ = hooks_repo
    run = _run_hooks(_project(tmp_path, repo, "v0.1.0", GOOD), pre_commit_home)
    assert run.returncode == 0, run.stdout + run.stderr


def test_files_names_where_the_policies_live(tmp_path, hooks_repo, pre_commit_home):
    repo, sha = hooks_repo
    bad = GOOD.replace("    strategy: ucb1\n", "    strategy: ucb1\n    exploration: 7\n")
    run = _run_hooks(_project(tmp_path, repo, sha, bad, folder="routing"), pre_commit_home, "routing/team.yaml")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "routing/team.yaml:5:18: aliases.auto/team.exploration: value 7 is out of range" in run.stdout, run.stdout
