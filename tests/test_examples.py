"""examples/: the real-provider LiteLLM config and the team policy are valid as shipped, checked
offline with the same commands a user runs (`aisia validate`, `aisia explain --deployments`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
AISIA = str(Path(sys.executable).parent / "aisia")
OFFLINE = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"}


def _aisia(*argv):
    return subprocess.run([AISIA, *argv], capture_output=True, text=True, timeout=120, cwd=ROOT, env=OFFLINE)


def test_team_policy_and_config_validate_over_the_shipped_defaults():
    run = _aisia("validate", "--deployments", "examples/litellm_config.yaml", "examples/team-policy.yaml")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "8 aliases" in run.stdout  # the 7 shipped auto/* aliases and the team's auto/review


def test_a_typo_in_the_configs_annotation_is_located(tmp_path):
    text = (EXAMPLES / "litellm_config.yaml").read_text()
    assert "        tier: pro\n" in text
    bad = tmp_path / "litellm_config.yaml"
    bad.write_text(text.replace("        tier: pro\n", "        teir: pro\n"))
    run = _aisia("validate", "--deployments", str(bad), "examples/team-policy.yaml")
    assert run.returncode == 1
    line = text[: text.index("        tier: pro\n")].count("\n") + 1
    assert f"{bad}:{line}:" in run.stdout and "teir" in run.stdout, run.stdout


def test_config_enables_the_plugin_with_keys_from_the_environment():
    config = yaml.safe_load((EXAMPLES / "litellm_config.yaml").read_text())
    assert config["litellm_settings"]["callbacks"] == ["aisia_plugin.litellm.plugin"]
    assert config["environment_variables"]["AISIA_POLICY"] == "examples/team-policy.yaml"
    assert config["general_settings"]["master_key"].startswith("os.environ/")
    remote = [d for d in config["model_list"] if not d["litellm_params"]["model"].startswith("ollama")]
    assert len(remote) >= 4
    for d in remote:
        assert d["litellm_params"]["api_key"].startswith("os.environ/"), d["model_name"]
    ids = [d["model_info"]["id"] for d in config["model_list"]]
    assert len(set(ids)) == len(ids)
    annotated = set(yaml.safe_load((EXAMPLES / "team-policy.yaml").read_text())["deployments"])
    assert annotated <= set(ids), "every annotation names a deployment of the config"


def _explain(alias, prompt):
    run = _aisia("explain", "--json", "--policy", "examples/team-policy.yaml", "--deployments",
                 "examples/litellm_config.yaml", "--alias", alias, prompt)
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(run.stdout)


def test_the_config_routes_the_shipped_and_the_team_aliases():
    # The coding specialists: deepseek-coder annotated in its model_info.aisia, claude-sonnet in
    # the team policy.
    coding = _explain("auto/coding", "Écris une fonction Python qui trie une liste")["decision"]
    assert coding["domain"] == "coding"
    assert {c["id"] for c in coding["candidates"] if "excluded" not in c} == {"deepseek-coder",
                                                                                "anthropic-claude-sonnet"}
    offline = _explain("auto/offline", "Summarize this paragraph")["decision"]
    assert offline["deployment_id"] == "llama-local"  # local by its ollama_chat/ prefix, no annotation
    review = _explain("auto/review", "Review this Python function for bugs: def f(x): return x / 0")["decision"]
    considered = {c["id"] for c in review["candidates"] if "excluded" not in c}
    assert review["strategy"] == "thompson" and review["deployment_id"] in considered
    assert considered and considered <= {"openai-gpt-4o", "anthropic-claude-sonnet", "deepseek-coder"}


@pytest.mark.proxy  # starts a LiteLLM proxy
def test_the_config_starts_a_proxy_that_lists_every_alias(tmp_path):
    """The example as a user starts it (from a folder holding examples/team-policy.yaml, which
    its environment_variables name), with placeholder keys: nothing is sent to a provider."""
    import shutil

    import httpx

    from proxy_harness import Proxy

    config = yaml.safe_load((EXAMPLES / "litellm_config.yaml").read_text())
    (tmp_path / "examples").mkdir()
    shutil.copy(EXAMPLES / "team-policy.yaml", tmp_path / "examples" / "team-policy.yaml")
    keys = {name: "sk-placeholder" for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DEEPSEEK_API_KEY",
                                                  "GEMINI_API_KEY")}
    proxy = Proxy(config, tmp_path, env={**keys, "LITELLM_MASTER_KEY": "sk-example-master"})
    assert proxy.master_key == "sk-example-master"  # read from the environment, as the config says
    proxy.start()
    try:
        models = httpx.get(proxy.base_url + "/models", headers=proxy.headers, timeout=30).json()["data"]
        ids = {m["id"] for m in models}
        assert {"auto", "auto/coding", "auto/cheap", "auto/fast", "auto/offline", "auto/smart", "auto/lkgp",
                "auto/review"} <= ids
        assert {d["model_name"] for d in config["model_list"]} <= ids
        r = httpx.post(proxy.base_url + "/chat/completions", headers=proxy.headers, timeout=30,
                       json={"model": "auto/nosuch", "messages": [{"role": "user", "content": "hi"}]})
        assert 400 <= r.status_code < 500 and "auto/review" in r.text
    finally:
        proxy.stop()
