"""examples/: the real-provider LiteLLM config and the team policy are valid as shipped, checked
offline with the same commands a user runs (`aisia validate`, `aisia explain --deployments`),
run in this process from the repository's root (the console script itself: test_validate.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture
def at_root(aisia, monkeypatch):
    """The command line, run from the repository's root (the paths below are relative to it),
    offline (LiteLLM reads its local price map)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return aisia


def test_team_policy_and_config_validate_over_the_shipped_defaults(at_root):
    code, out, err = at_root("validate", "--deployments", "examples/litellm_config.yaml", "examples/team-policy.yaml")
    assert code == 0, out + err
    assert "8 aliases" in out  # the 7 shipped auto/* aliases and the team's auto/review


def test_a_typo_in_the_configs_annotation_is_located(tmp_path, at_root):
    text = (EXAMPLES / "litellm_config.yaml").read_text()
    assert "        tier: pro\n" in text
    bad = tmp_path / "litellm_config.yaml"
    bad.write_text(text.replace("        tier: pro\n", "        teir: pro\n"))
    code, out, _ = at_root("validate", "--deployments", str(bad), "examples/team-policy.yaml")
    assert code == 1
    line = text[: text.index("        tier: pro\n")].count("\n") + 1
    assert f"{bad}:{line}:" in out and "teir" in out, out


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


def test_the_config_routes_the_shipped_and_the_team_aliases(at_root):
    def _explain(alias, prompt):
        code, out, err = at_root("explain", "--json", "--policy", "examples/team-policy.yaml", "--deployments",
                                 "examples/litellm_config.yaml", "--alias", alias, prompt)
        assert code == 0, out + err
        return json.loads(out)

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
