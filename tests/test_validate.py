"""`aisia validate`: every kind of policy mistake exits 1 and names the file, line, column and
field; usage and I/O errors exit 2; the shipped policies pass."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from aisia_plugin.cli import main

REPO = Path(__file__).resolve().parent.parent
FIX = "tests/fixtures/policies"
BAD = f"{FIX}/bad"
RE2_HINT = "patterns must be RE2 syntax, which matches in linear time: no backreferences or lookaround"


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    # Paths in messages are shown as given; run from the repository root so that they are short
    # and the expected messages exact.
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("AISIA_POLICY", raising=False)


# --- the shipped policies ------------------------------------------------------------------


def test_shipped_policies_are_valid(aisia):
    code, out, err = aisia("validate", "policies/")
    assert code == 0, out + err
    n_files = len(list((REPO / "policies").glob("*.y*ml")))
    assert re.fullmatch(rf"ok: {n_files} files, \d+ aliases\n", out), out
    assert err == ""


def test_shipped_policies_fail_at_most_for_strategies_not_yet_registered(aisia):
    """While strategies are still being written, the only acceptable problem of the shipped
    policy is an alias naming a strategy no plugin registers yet (test above then fails too)."""
    code, out, err = aisia("validate", "--format", "json", "policies/")
    report = json.loads(out)
    others = [e for e in report["errors"] if not e["message"].startswith("unknown strategy")]
    assert others == []
    assert code == (0 if not report["errors"] else 1)


def test_default_path_is_the_configured_policy_path(aisia, monkeypatch):
    monkeypatch.setenv("AISIA_POLICY", f"{FIX}/good")
    code, out, _ = aisia("validate")
    assert (code, out) == (0, "ok: 1 file, 2 aliases\n")


# --- layering over the shipped defaults ---------------------------------------------------------

SHIPPED = sorted(p.name for p in (REPO / "policies").glob("*.y*ml"))
SHIPPED_ALIASES = ["auto", "auto/coding", "auto/fast", "auto/cheap", "auto/offline", "auto/smart", "auto/lkgp"]


def test_a_team_file_that_only_annotates_deployments_is_a_complete_policy(aisia, monkeypatch):
    from aisia_plugin.policy import load_policy

    code, out, _ = aisia("validate", f"{FIX}/layered/annotate.yaml")
    assert (code, out) == (0, f"ok: 1 file over the shipped defaults ({len(SHIPPED)} files), 7 aliases\n")
    policy = load_policy([f"{FIX}/layered/annotate.yaml"])
    assert list(policy.aliases) == SHIPPED_ALIASES and policy.defaults is True
    assert policy.deployments["ollama-*"].tier == "free"
    assert policy.mode_packs["quality-first"].weights  # from the shipped mode_packs.yaml
    # The proxy reads $AISIA_POLICY the same way.
    monkeypatch.setenv("AISIA_POLICY", f"{FIX}/layered/annotate.yaml")
    assert load_policy() == policy


def test_a_team_file_adds_an_alias_and_its_values_win_without_overrides(aisia):
    from aisia_plugin.policy import load_policy

    code, out, _ = aisia("validate", "--format", "json", f"{FIX}/layered/team.yaml")
    report = json.loads(out)
    assert code == 0 and report["errors"] == [] and report["aliases"] == 8
    assert [Path(f).name for f in report["default_files"]] == SHIPPED
    policy = load_policy([f"{FIX}/layered/team.yaml"])
    assert policy.aliases["auto/team"].strategy == "cost"
    # The shipped auto/coding says contextual with domain_hint coding; the team's value wins, key by key.
    coding = policy.aliases["auto/coding"]
    assert (coding.strategy, coding.domain_hint) == ("thompson", "coding")
    assert policy.costs.by_provider_prefix["openai"] == 4.0  # the shipped file says 5.0
    assert policy.costs.by_provider_prefix["groq"] == 0.30  # kept


def test_the_conflict_rule_still_holds_between_the_users_own_files(aisia):
    code, out, _ = aisia("validate", f"{FIX}/layered/team.yaml", f"{FIX}/layered/team-conflict.yaml")
    assert code == 1
    assert out.splitlines() == [
        f"{FIX}/layered/team-conflict.yaml:4:15: aliases.auto/team.strategy: conflicts with {FIX}/layered/team.yaml:6 "
        "which sets it to 'cost'; this file sets 'latency' (add 'overrides: true' to this file to make it win)",
    ]


def test_defaults_false_makes_the_files_the_whole_policy():
    from aisia_plugin.policy import load_policy

    policy = load_policy([f"{FIX}/good/minimal.yaml"])
    assert list(policy.aliases) == ["auto", "auto/smart"] and policy.defaults is False
    assert list(policy.domains.definitions) == ["coding"]
    assert policy.costs.by_provider_prefix == {}  # the schema's default, not the shipped table


def test_the_shipped_directory_and_its_files_are_not_layered_twice(aisia):
    code, out, _ = aisia("validate", "policies/")
    assert out == f"ok: {len(SHIPPED)} files, 7 aliases\n"
    # One shipped file named alone is layered over the others: its references resolve.
    code, out, _ = aisia("validate", "--format", "json", "policies/aliases.yaml")
    report = json.loads(out)
    assert code == 0 and [Path(f).name for f in report["default_files"]] == [n for n in SHIPPED if n != "aliases.yaml"]


def test_a_bad_team_file_is_reported_at_its_own_lines(aisia):
    code, out, _ = aisia("validate", f"{BAD}/unknown_key.yaml")
    assert code == 1 and out.startswith(f"{BAD}/unknown_key.yaml:5:5: ")


def test_explain_reads_the_same_layering(capsys):
    assert main(["explain", "--policy", f"{FIX}/layered/team.yaml", "--alias", "auto/team", "--json", "hello"]) == 0
    out, _ = capsys.readouterr()
    assert json.loads(out)["decision"]["strategy"] == "cost"
    assert main(["explain", "--policy", f"{FIX}/good/minimal.yaml", "--alias", "auto/team", "hello"]) == 2
    _, err = capsys.readouterr()
    assert "unknown alias 'auto/team'; known: auto, auto/smart" in err


# --- one fixture per kind of mistake --------------------------------------------------------

CASES = {
    "yaml_syntax": [
        f"{BAD}/yaml_syntax.yaml:5:4: <document>: YAML syntax error: expected <block end>, but found "
        "'<block mapping start>' (while parsing a block mapping started at line 3, column 3); "
        "check the indentation of this line against the keys above it",
    ],
    "unknown_key": [
        f"{BAD}/unknown_key.yaml:5:5: aliases.auto.stratgy: unknown key 'stratgy'; did you mean 'strategy'?",
    ],
    "wrong_type": [
        f"{BAD}/wrong_type.yaml:6:17: aliases.auto.failover.attempts: expected integer, got string 'two'",
    ],
    "out_of_range": [
        f"{BAD}/out_of_range.yaml:5:18: aliases.auto.exploration: value 1.5 is out of range: must be <= 1",
    ],
    "domain_without_patterns": [
        f"{BAD}/domain_without_patterns.yaml:4:5: domains.definitions.coding.patterns: required field 'patterns' is missing",
    ],
    "pack_without_weights": [
        f"{BAD}/pack_without_weights.yaml:3:3: mode_packs.fast.weights: required field 'weights' is missing",
    ],
    "unknown_mode_pack": [
        f"{BAD}/unknown_mode_pack.yaml:8:16: aliases.auto.mode_pack: unknown mode pack 'quality-frist'; did you mean 'quality-first'?",
    ],
    "unknown_strategy": [
        f"{BAD}/unknown_strategy.yaml:4:15: aliases.auto.strategy: unknown strategy 'ucb'; did you mean 'ucb1'? "
        "(no installed plugin provides it)",
    ],
    "backreference": [
        f"{BAD}/backreference.yaml:5:29: domains.definitions.coding.patterns.1: pattern '(\\w+) \\1' is rejected: "
        f"backreference \\1 is not supported; {RE2_HINT}",
    ],
    "lookahead": [
        f"{BAD}/lookahead.yaml:5:18: domains.definitions.coding.patterns.0: pattern '\\bpython(?=3)' is rejected: "
        f"lookahead (?= is not supported; {RE2_HINT}",
    ],
    "duplicate_key": [
        f"{BAD}/duplicate_key.yaml:6:5: aliases.auto.exploration: duplicate key 'exploration' (first set at line 5); "
        "only one value may be given",
    ],
    "zero_weights": [
        f"{BAD}/zero_weights.yaml:5:14: mode_packs.nothing.weights: weights are all zero: at least one factor must weigh more than 0",
    ],
    "non_finite": [
        f"{BAD}/non_finite.yaml:3:22: bandit.cost_scale_per_1m: must be a finite number, got .inf",
        f"{BAD}/non_finite.yaml:6:22: mode_packs.odd.weights.quota: must be a finite number, got .nan",
    ],
    "thresholds": [
        f"{BAD}/thresholds.yaml:4:22: circuit_breaker.max_retry_after_s: value 60 is below "
        "circuit_breaker.rate_limit_cooldown_s (600): the cap on Retry-After must be at least the default cooldown",
        f"{BAD}/thresholds.yaml:5:1: reward: quality_weight, latency_weight and feedback_weight are all zero: "
        "a successful call would have no reward; give at least one of them a weight above 0",
    ],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_kind_of_mistake_is_reported_with_file_line_and_field(aisia, name):
    code, out, err = aisia("validate", f"{BAD}/{name}.yaml")
    assert code == 1, out + err
    assert out.splitlines() == CASES[name]
    n = len(CASES[name])
    assert err == f"invalid policy: {n} error{'s' if n > 1 else ''} in 1 file\n"


def test_every_bad_fixture_has_a_case():
    on_disk = {p.stem for p in (REPO / BAD).glob("*.yaml")}
    assert on_disk == set(CASES) | {"many_errors", "mixed_shapes"}


def test_several_errors_in_one_file_are_all_reported_in_one_run(aisia):
    code, out, _ = aisia("validate", f"{BAD}/many_errors.yaml")
    assert code == 1
    f = f"{BAD}/many_errors.yaml"
    assert out.splitlines() == [  # sorted by line, schema and semantic problems together
        f"{f}:4:15: aliases.auto.strategy: unknown strategy 'thompsn'; did you mean 'thompson'? (no installed plugin provides it)",
        f"{f}:5:5: aliases.auto.exploraton: unknown key 'exploraton'; did you mean 'exploration'?",
        f"{f}:7:17: aliases.auto.failover.attempts: value 11 is out of range: must be <= 10",
        # layered over the shipped defaults, whose mode packs are known
        f"{f}:10:16: aliases.auto/coding.mode_pack: unknown mode pack 'missing-pack'; known: chaos-mode, cost-saver, "
        "offline-friendly, quality-first, reliability-first, ship-fast",
        f"{f}:11:18: aliases.auto/coding.cost_weight: expected number or null, got string 'high'",
        f"{f}:13:3: circuit_breaker.failure_treshold: unknown key 'failure_treshold'; did you mean 'failure_threshold'?",
    ]


def test_semantic_checks_still_run_when_values_have_the_wrong_shape(aisia):
    code, out, _ = aisia("validate", f"{BAD}/mixed_shapes.yaml")
    assert code == 1
    f = f"{BAD}/mixed_shapes.yaml"
    assert out.splitlines() == [
        f"{f}:3:9: aliases.auto: expected object, got string 'ucb1'",
        f"{f}:6:18: aliases.auto/coding.domain_hint: unknown domain 'codin'; did you mean 'coding'?",
        f"{f}:7:17: aliases.auto/coding.candidates: expected object, got array ['gpt-4o']",
        f"{f}:11:29: domains.definitions.coding.patterns.1: pattern '(?<!un)safe' is rejected: "
        f"lookbehind (?<! is not supported; {RE2_HINT}",
        f"{f}:12:15: domains.definitions.coding.weight: value 0 is out of range: must be > 0",
    ]


def test_errors_of_several_files_are_reported_in_one_run(aisia):
    code, out, err = aisia("validate", f"{BAD}/unknown_key.yaml", f"{BAD}/yaml_syntax.yaml", f"{BAD}/wrong_type.yaml")
    assert code == 1
    files = [line.split(":", 1)[0] for line in out.splitlines()]
    assert files == [f"{BAD}/unknown_key.yaml", f"{BAD}/yaml_syntax.yaml", f"{BAD}/wrong_type.yaml"]
    assert err == "invalid policy: 3 errors in 3 files\n"


# --- several files ---------------------------------------------------------------------------


def test_two_files_that_conflict(aisia):
    code, out, _ = aisia("validate", f"{FIX}/conflict")
    assert code == 1
    assert out.splitlines() == [
        f"{FIX}/conflict/20-team.yaml:4:15: aliases.auto.strategy: conflicts with {FIX}/conflict/10-base.yaml:4 "
        "which sets it to 'ucb1'; this file sets 'thompson' (add 'overrides: true' to this file to make it win)",
    ]


def test_the_same_with_overrides_true_passes_and_the_later_file_wins(aisia):
    from aisia_plugin.policy import load_policy

    code, out, _ = aisia("validate", f"{FIX}/override")
    assert (code, out) == (0, "ok: 2 files, 1 alias\n")
    policy = load_policy([f"{FIX}/override"])
    assert policy.aliases["auto"].strategy == "thompson"
    assert policy.aliases["auto"].exploration == 0.1  # set identically by the first file only


def test_a_file_checked_alone_misses_references_to_its_siblings_unless_asked(aisia):
    code, out, _ = aisia("validate", f"{FIX}/split/aliases.yaml")
    assert code == 1
    assert out.startswith(f"{FIX}/split/aliases.yaml:5:16: aliases.auto/smart.mode_pack: unknown mode pack 'quality-first'")
    code, out, _ = aisia("validate", "--siblings", f"{FIX}/split/aliases.yaml", f"{FIX}/split/mode_packs.yaml")
    assert (code, out) == (0, "ok: 2 files, 1 alias\n")


def test_a_selector_that_matches_nothing_is_not_an_error(aisia):
    code, out, _ = aisia("validate", f"{FIX}/good/minimal.yaml")
    assert (code, out) == (0, "ok: 1 file, 2 aliases\n")


# --- output formats --------------------------------------------------------------------------


def test_json_format(aisia):
    code, out, _ = aisia("validate", "--format", "json", f"{BAD}/many_errors.yaml", f"{BAD}/pack_without_weights.yaml",
                            f"{BAD}/duplicate_key.yaml")
    assert code == 1
    report = json.loads(out)
    assert report["valid"] is False
    assert report["files"] == [f"{BAD}/many_errors.yaml", f"{BAD}/pack_without_weights.yaml", f"{BAD}/duplicate_key.yaml"]
    # 6 + 1 + the duplicate key, and a conflict: both files set aliases.auto.strategy
    assert len(report["errors"]) == 9
    for e in report["errors"]:
        assert set(e) == {"file", "line", "column", "path", "message", "kind"}
        assert isinstance(e["line"], int) and e["line"] > 0 and e["column"] > 0
    kinds = {(e["file"].rsplit("/", 1)[-1], e["path"]): e["kind"] for e in report["errors"]}
    assert kinds[("many_errors.yaml", "aliases.auto.exploraton")] == "schema"
    assert kinds[("many_errors.yaml", "aliases.auto.strategy")] == "semantic"
    assert kinds[("duplicate_key.yaml", "aliases.auto.strategy")] == "conflict"
    assert kinds[("pack_without_weights.yaml", "mode_packs.fast.weights")] == "schema"
    assert {
        "file": f"{BAD}/duplicate_key.yaml", "line": 6, "column": 5, "path": "aliases.auto.exploration",
        "message": "duplicate key 'exploration' (first set at line 5); only one value may be given", "kind": "yaml",
    } in report["errors"]


def test_json_format_on_success(aisia):
    code, out, _ = aisia("validate", "--format", "json", f"{FIX}/good")
    assert code == 0
    report = json.loads(out)
    assert report["valid"] is True and report["errors"] == []
    assert report["files"] == [f"{FIX}/good/minimal.yaml"]


def test_json_format_conflict_kind(aisia):
    _, out, _ = aisia("validate", "--format", "json", f"{FIX}/conflict")
    (e,) = json.loads(out)["errors"]
    assert (e["kind"], e["path"], e["line"], e["column"]) == ("conflict", "aliases.auto.strategy", 4, 15)


def test_github_format(aisia):
    code, out, _ = aisia("validate", "--format", "github", f"{BAD}/unknown_key.yaml", f"{BAD}/out_of_range.yaml")
    assert code == 1
    assert out.splitlines() == [
        f"::error file={BAD}/unknown_key.yaml,line=5,col=5,title=aisia policy::aliases.auto.stratgy: "
        "unknown key 'stratgy'; did you mean 'strategy'?",
        f"::error file={BAD}/out_of_range.yaml,line=5,col=18,title=aisia policy::aliases.auto.exploration: "
        "value 1.5 is out of range: must be <= 1",
    ]


def test_github_annotation_escapes_its_separators():
    from aisia_plugin.commands.validate import github_annotation
    from aisia_plugin.policy import PolicyIssue

    line = github_annotation(PolicyIssue("a,b:c.yaml", 0, 0, "x", "100% bad\nreally", "io"))
    assert line == "::error file=a%2Cb%3Ac.yaml,title=aisia policy::x: 100%25 bad%0Areally"


# --- exit 2: usage and I/O errors --------------------------------------------------------------


def test_missing_path_exits_2(aisia):
    code, out, err = aisia("validate", "policies/", "no/such/policy.yaml")
    assert code == 2
    assert out == "no/such/policy.yaml:0:0: <document>: no such file or directory\n"
    assert err == "I/O error: 1 error in 1 file\n"


def test_missing_path_exits_2_in_json_too(aisia):
    code, out, _ = aisia("validate", "--format", "json", "no/such/dir")
    assert code == 2
    report = json.loads(out)
    assert report["valid"] is False and report["errors"][0]["kind"] == "io"


def test_directory_without_policy_files_exits_2(aisia):
    code, out, _ = aisia("validate", f"{FIX}/empty_dir")
    assert code == 2
    assert out == f"{FIX}/empty_dir:0:0: <document>: directory holds no .yaml or .yml policy file\n"


def test_unreadable_file_exits_2(aisia, monkeypatch):
    target = (REPO / FIX / "good" / "minimal.yaml").resolve()
    real = Path.read_text

    def read_text(self, *a, **k):
        if self.resolve() == target:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", read_text)
    code, out, _ = aisia("validate", f"{FIX}/good/minimal.yaml")
    assert code == 2
    assert out.startswith(f"{FIX}/good/minimal.yaml:0:0: <document>: cannot read: ")
    assert "Permission denied" in out


@pytest.mark.parametrize("argv", [["--format", "xml", "policies/"], ["--no-such-option"]])
def test_bad_usage_exits_2(aisia, argv):
    code, out, err = aisia("validate", *argv)
    assert code == 2
    assert "usage: aisia" in err


# --- the real console script -------------------------------------------------------------------


def test_console_script_entry_point():
    script = Path(sys.executable).with_name("aisia")
    assert script.exists(), f"console script missing next to {sys.executable}"
    proc = subprocess.run([str(script), "validate", f"{BAD}/unknown_key.yaml"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == f"{BAD}/unknown_key.yaml:5:5: aliases.auto.stratgy: unknown key 'stratgy'; did you mean 'strategy'?\n"
    proc = subprocess.run([str(script), "validate", f"{FIX}/good"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "ok: 1 file, 2 aliases\n")
    proc = subprocess.run([str(script), "validate", "no/such/path"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2


# --- schema, docs, pre-commit --------------------------------------------------------------------


def test_schema_command_prints_the_schema(capsys):
    from aisia_plugin.policy.schema import load_schema

    assert main(["schema"]) == 0
    out, _ = capsys.readouterr()
    assert json.loads(out) == load_schema()


def test_docs_check_detects_a_stale_reference(capsys, tmp_path):
    ref = tmp_path / "policy-reference.md"
    assert main(["docs", "--check", "--output", str(ref)]) == 1  # missing
    capsys.readouterr()
    assert main(["docs", "--output", str(ref)]) == 0
    assert main(["docs", "--check", "--output", str(ref)]) == 0
    ref.write_text(ref.read_text(encoding="utf-8").replace("Only 1 exists.", "Several exist."), encoding="utf-8")
    capsys.readouterr()
    assert main(["docs", "--check", "--output", str(ref)]) == 1
    _, err = capsys.readouterr()
    assert "is out of date with the schema; run `aisia docs` to regenerate it" in err
    assert "-| `version` |" in err and "+| `version` |" in err


def test_shipped_reference_is_current(capsys):
    assert main(["docs", "--check"]) == 0, capsys.readouterr().err


def test_pre_commit_hook():
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    (hook,) = [h for h in hooks if h["id"] == "aisia-validate"]
    assert hook["entry"] == "aisia validate"
    assert hook["language"] == "python"
    assert hook["pass_filenames"] is True
    files = re.compile(hook["files"])
    assert files.search("policies/aliases.yaml") and files.search("deploy/policies/team.yml")
    assert not files.search("src/config.yaml") and not files.search("policies/README.md")


# --- hostile and empty files (issue 11, findings 1 and 5) ------------------------------------------

BOMB = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9 if p else ['lol'] * 9)}]\n"
               for p, c in zip([None, *"abcdefgh"], "abcdefghi"))


@pytest.mark.parametrize("text,expected", [
    (BOMB, ":1:13: f.0.3.3.7.2.1: the document expands to more than 100000 values"),
    ("a: " + "[" * 900 + "]" * 900 + "\n", ":1:67: <document>: nested too deeply: more than 64 levels"),
    ("a: " + "[" * 70 + "]" * 70 + "\n", ":1:68: <document>: nested too deeply: more than 64 levels"),
    ("", ":1:1: <document>: the file holds no policy (it is empty, only comments, or null)"),
    ("   \n\n", ":1:1: <document>: the file holds no policy"),
    ("# only a comment\n", ":1:1: <document>: the file holds no policy"),
    ("null\n", ":1:1: <document>: the file holds no policy"),
    ("version: 1\ndefaults: false\n", ":1:1: aliases: the policy defines no alias: it would route nothing"),
    ("version: 1\nbandit:\n  latency_scale_s: 1e-3\n",
     ":3:20: bandit.latency_scale_s: expected number, got string '1e-3'; YAML reads 1e-3 as text: write it as 1.0e-3"),
    ("version: 1\nbase: &b {strategy: cost}\n", ":2:1: base: unknown key 'base'"),
])
def test_hostile_or_empty_files_get_a_located_error(aisia, tmp_path, text, expected):
    f = tmp_path / "p.yaml"
    f.write_text(text, encoding="utf-8")
    code, out, err = aisia("validate", str(f))
    assert code == 1, out + err
    assert out.startswith(str(f) + expected), out
    assert "Traceback" not in out + err


def test_merge_keys_work_in_a_policy(aisia, tmp_path):
    from aisia_plugin.policy import load_policy

    f = tmp_path / "p.yaml"
    f.write_text("version: 1\ndefaults: false\naliases:\n  auto: &base {strategy: cost, exploration: 0.2}\n"
                 "  auto/b:\n    <<: *base\n    strategy: latency\n", encoding="utf-8")
    policy = load_policy([f])
    assert (policy.aliases["auto/b"].strategy, policy.aliases["auto/b"].exploration) == ("latency", 0.2)
    f.write_text("version: 1\ndefaults: false\naliases:\n  auto:\n    <<: [1]\n    strategy: cost\n", encoding="utf-8")
    code, out, _ = aisia("validate", str(f))
    assert code == 1 and out == f"{f}:5:10: aliases.auto: a merge key '<<' takes a mapping or a list of mappings\n"


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs here")
def test_a_fifo_or_a_device_is_not_a_policy_file(aisia, tmp_path):
    import os

    fifo = tmp_path / "policy.yaml"
    os.mkfifo(fifo)
    code, out, _ = aisia("validate", str(fifo))
    assert code == 2 and out == f"{fifo}:0:0: <document>: not a regular file (a policy must be a file or a directory)\n"
    code, out, _ = aisia("validate", "/dev/zero")
    assert code == 2 and "not a regular file" in out


def _big_domain(tmp_path):
    pats = "".join(f"        - '\\b{'x' * 12}{i}\\w{{0,50}}\\b'\n" for i in range(300))
    f = tmp_path / "big.yaml"
    f.write_text(f"version: 1\ndomains:\n  definitions:\n    big:\n      patterns:\n{pats}", encoding="utf-8")
    return f


def test_validate_builds_the_engines_combined_programs(capsys, aisia, tmp_path):
    """Issue 11, finding 2: each pattern compiles alone, the domains' combined RE2 programs do
    not; validate reports the domain at its line, explain and replay refuse the policy the same way."""
    f = _big_domain(tmp_path)
    code, out, _ = aisia("validate", str(f))
    assert code == 1
    assert out.startswith(f"{f}:4:5: domains.definitions.big: the patterns do not fit RE2's memory budget for ")
    assert main(["explain", "--policy", str(f), "hello"]) == 1
    _, err = capsys.readouterr()
    assert err.startswith(f"{f}:4:5: domains.definitions.big: ") and "Traceback" not in err
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"id": "r", "messages": [{"role": "user", "content": "x"}], "outcomes": {"a-1": {"score": 1}}}\n')
    assert main(["replay", "--policy", str(f), "--data", str(trace)]) == 1
    assert capsys.readouterr().err.startswith(f"{f}:4:5: domains.definitions.big: ")


# --- settings that do nothing (issue 11, finding 6) ----------------------------------------------


def test_a_setting_the_strategy_does_not_read_is_a_warning(aisia, tmp_path):
    f = tmp_path / "team.yaml"
    f.write_text("version: 1\naliases:\n  auto/x:\n    strategy: cost\n    mode_pack: quality-first\n"
                 "    exploration_c: 2\n  auto/y: {strategy: rules, mode_pack: quality-first, exploration: 0.1}\n",
                 encoding="utf-8")
    code, out, _ = aisia("validate", str(f))
    assert code == 0
    assert out.splitlines() == [
        f"{f}:5:5: aliases.auto/x.mode_pack: warning: has no effect: strategy 'cost' does not read mode_pack "
        "(it reads exploration); remove it, or choose a strategy that uses it",
        f"{f}:6:5: aliases.auto/x.exploration_c: warning: has no effect: strategy 'cost' does not read exploration_c "
        "(it reads exploration); remove it, or choose a strategy that uses it",
        f"ok: 1 file over the shipped defaults ({len(SHIPPED)} files), 9 aliases",
    ]
    code, out, _ = aisia("validate", "--strict", str(f))
    assert code == 1 and out.count("warning: has no effect") == 2
    code, out, _ = aisia("validate", "--format", "github", str(f))
    assert out.startswith(f"::warning file={f},line=5,col=5,title=aisia policy::aliases.auto/x.mode_pack: has no effect")
    code, out, _ = aisia("validate", "--format", "json", str(f))
    report = json.loads(out)
    assert report["valid"] and [w["kind"] for w in report["warnings"]] == ["warning", "warning"]


def test_every_setting_of_the_shipped_policies_acts(aisia):
    code, out, _ = aisia("validate", "--strict", "policies/")
    assert (code, out) == (0, f"ok: {len(SHIPPED)} files, 7 aliases\n")


def test_every_builtin_strategy_says_which_settings_it_reads():
    from aisia_plugin.plugins import strategies
    from aisia_plugin.policy.semantic import STRATEGY_SETTINGS

    for name, strategy in strategies().items():
        assert strategy.settings <= set(STRATEGY_SETTINGS), name
        assert "exploration" in strategy.settings, name


@pytest.mark.parametrize("written,meant", [("cheapest", "cost"), ("lowest_cost", "cost"), ("quickest", "latency"),
                                           ("sticky", "lkgp"), ("bandit", "ucb1")])
def test_an_unknown_strategy_is_suggested_by_meaning_as_well_as_spelling(aisia, write_file, written, meant):
    # 'cheapest' is closest in letters to 'fast' (the latency strategy): the suggestion follows
    # what the word means.
    path = write_file(f"""\
        version: 1
        aliases:
          auto:
            strategy: {written}
        """)
    code, out, _ = aisia("validate", path)
    assert code == 1
    assert out == (f"{path}:4:15: aliases.auto.strategy: unknown strategy '{written}'; did you mean '{meant}'? "
                   "(no installed plugin provides it)\n")


# --- --domain-prompts: the domain detection measured on labelled prompts -----------------------


def test_domain_scores_count_accepted_domains_as_correct_and_never_as_false_positives():
    from aisia_plugin.domain_eval import score

    labels = [("a", "math", set()), ("a", "math", set()), ("b", None, {"finance"}), ("c", None, set()),
              ("c", None, set()), ("d", "coding", set())]
    got = score(["math", None, "finance", "math", None, "math"], labels, ["math", "coding", "finance"])
    assert got["domains"]["math"] == {"support": 2, "predicted": 3, "tp": 1, "fp": 2, "accepted_other": 0,
                                      "precision": round(1 / 3, 4), "recall": 0.5}
    # The ambiguous prompt's finance is correct, counted apart, and finance has no recall support.
    assert got["domains"]["finance"] == {"support": 0, "predicted": 1, "tp": 0, "fp": 0, "accepted_other": 1,
                                         "precision": 1.0, "recall": None}
    assert got["accuracy"] == round(3 / 6, 4)
    assert (got["unlabelled"], got["unlabelled_false_positive_rate"]) == (2, 0.5)
    assert got["errors"] == {"a -> None": 1, "c -> math": 1, "d -> math": 1}


def test_validate_measures_the_domain_detection_on_labelled_prompts(aisia, tmp_path):
    path = tmp_path / "labelled.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"prompt": "Write a Python function that parses JSON and a pytest test for it", "domain": "coding"},
        {"prompt": "Translate into French: good morning", "domain": "translation", "dataset": "wmt"},
        {"prompt": "Hello, how are you today?", "domain": None, "dataset": "chat"},
        {"prompt": "Hello again, nice weather", "domain": "math", "dataset": "mislabelled"}]) + "\n")
    code, out, err = aisia("validate", "policies/", "--domain-prompts", path)
    assert (code, err) == (0, "")
    assert ("domain detection on 4 labelled prompts: accuracy 0.750 (label or accepted domain), false-positive "
            "rate on the 1 expecting no domain: 0.000") in out
    assert "| math | 1 | 0 | 0 | 0 | 0 | - | 0.00 |" in out and "| coding | 1 | 1 | 1 | 0 | 0 | 1.00 | 1.00 |" in out
    assert out.endswith("most frequent errors (dataset -> predicted):\n  mislabelled -> None: 1\n")
    code, out, _ = aisia("validate", "policies/", "--format", "json", "--domain-prompts", path)
    got = json.loads(out)["domain_detection"]
    assert (code, got["prompts"], got["accuracy"], got["domains"]["translation"]["tp"]) == (0, 4, 0.75, 1)


def test_a_bad_labelled_prompts_file_names_each_bad_line_and_exits_2(aisia, tmp_path):
    path = tmp_path / "labelled.jsonl"
    path.write_text('{"prompt": "x", "domain": "cooking"}\nnot json\n[1]\n{"prompt": "y", "accept": "math"}\n'
                    '{"prompt": "z", "domain": null}\n')
    code, out, err = aisia("validate", "policies/", "--domain-prompts", path)
    assert code == 2
    lines = out.splitlines()
    assert [ln.split(": ", 2)[0] for ln in lines] == [f"{path}:{n}:0" for n in (1, 2, 3, 4)]
    assert "unknown domain 'cooking'; the policy defines: math, coding" in lines[0]
    assert lines[1].endswith("not JSON: Expecting value: line 1 column 1 (char 0)")
    assert lines[2].endswith('expected an object with a string "prompt"')
    assert lines[3].endswith('"accept" must be a list of domain names')
    assert err == "I/O error: 4 errors in 1 file\n"
    code, out, _ = aisia("validate", "policies/", "--domain-prompts", tmp_path / "missing.jsonl")
    assert code == 2 and "cannot read: " in out


def test_validate_proposes_the_words_that_mark_a_domains_prompts_and_its_patterns_lack(aisia, tmp_path):
    # "zorblax" and "write" mark every coding prompt and no other ("write" alone is no coding
    # pattern's match); "python" marks them too but the coding patterns match it already; "case"
    # is in every prompt and "story" in the prompts expecting no domain.
    path = tmp_path / "labelled.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for i in range(20) for r in (
        {"prompt": f"Write the zorblax in Python, case {i}", "domain": "coding", "dataset": "ab"[i % 2]},
        {"prompt": f"Tell me a story about a dragon, case {i}", "domain": None, "dataset": "c"})))
    code, out, _ = aisia("validate", "policies/", "--domain-prompts", path, "--propose-words", "--format", "json")
    words = json.loads(out)["domain_detection"]["proposed_words"]
    assert code == 0 and list(words) == ["coding"]
    assert [w["word"] for w in words["coding"]] == ["write", "zorblax"]
    assert words["coding"][1] == {"word": "zorblax", "z": 4.646, "support": 20, "others": 0, "datasets": 2,
                                  "precision": 1.0}
    # A word must come from as many datasets of its domain as asked: these come from two.
    code, out, _ = aisia("validate", "policies/", "--domain-prompts", path, "--propose-words", "--min-datasets", "3")
    assert code == 0 and out.endswith("others):\n  none\n")
    code, _, err = aisia("validate", "policies/", "--propose-words")
    assert code == 2 and "--propose-words needs --domain-prompts FILE" in err


def test_a_spend_target_over_a_deployment_counted_at_0_is_warned_at_its_line(aisia, write_file):
    """A self-hosted deployment LiteLLM has no price for is free to the router: a spend target
    over it would count its calls at $0 without a word. `--deployments` says so, at the target."""
    config = write_file("""
        model_list:
          - model_name: llama3
            litellm_params: {model: ollama/llama3}
          - model_name: gpu
            litellm_params: {model: hosted_vllm/my-org/my-model, api_base: "http://127.0.0.1:8000/v1"}
            model_info: {id: gpu-1}
          - model_name: priced
            litellm_params: {model: hosted_vllm/other, input_cost_per_token: 0.000001, output_cost_per_token: 0.000002}
            model_info: {id: priced-1}
        """, "litellm.yaml")
    team = write_file("""
        aliases:
          auto/paced:
            strategy: ucb1
            candidates: {ids: [gpu-1, priced-1]}
            budget: {target_usd_per_1k_requests: 0.5}
        """, "team.yaml")
    code, out, err = aisia("validate", "--deployments", config, team)
    assert code == 0, out + err
    line = next(l for l in out.splitlines() if "target_usd_per_1k_requests" in l)
    assert line.startswith(f"{team}:6:14: ") and "warning: counts the calls of gpu-1 (hosted_vllm/my-org/my-model" in line
    assert "priced-1" not in line
    code, out, _ = aisia("validate", "--strict", "--deployments", config, team)
    assert code == 1


def test_a_prior_model_file_that_cannot_be_read_is_the_policys_error_at_its_field(aisia, write_file, tmp_path):
    """`contextual.prior_model` is read as the engine reads it, when the policy loads: a missing
    or broken file is refused by `aisia validate` and by the loader the proxy uses, at the field
    (operator's alias or a team's), never at the proxy's start or a team's first request."""
    from aisia_plugin.contextual import ContextualModels
    from aisia_plugin.contextual_io import save_model_file
    from aisia_plugin.policy import PolicyError, load_policy_with_locations

    good, missing = tmp_path / "model.json", tmp_path / "no-such-model.json"
    save_model_file(ContextualModels(), good)
    operator = write_file(f"""\
        version: 1
        aliases:
          auto:
            contextual:
              prior_model: {missing}
        """, "operator.yaml")
    team = write_file(f"""\
        version: 1
        aliases:
          auto:
            contextual:
              prior_model: {good}
        teams:
          t1:
            aliases:
              auto:
                contextual:
                  prior_model: {missing}
        """, "team.yaml")
    for path, line, field in ((operator, 5, "aliases.auto.contextual.prior_model"),
                              (team, 11, "teams.t1.aliases.auto.contextual.prior_model")):
        code, out, err = aisia("validate", path)
        assert code == 1 and f"{path}:{line}:" in out and f"{field}: {missing}: cannot read the model file" in out, out
        with pytest.raises(PolicyError, match=re.escape(f"{path}:{line}:")):
            load_policy_with_locations([path])
    fine = write_file(f"""\
        version: 1
        aliases:
          auto:
            contextual:
              prior_model: {good}
        """, "fine.yaml")
    assert aisia("validate", fine)[0] == 0
    assert load_policy_with_locations([fine]).layers == {}


def test_setting_one_tiers_prior_keeps_the_other_tiers_defaults(aisia, write_file):
    # Each tier's prior has its own default: `by_tier: {pro: 0.9}` changes the pro tier only
    # (before, the other tiers fell to `untiered`, 0.5). (Found by a review.)
    from aisia_plugin.decision import Deployment
    from aisia_plugin.policy import load_policy
    from aisia_plugin.quality import prior_quality

    path = write_file("version: 1\nquality:\n  prior:\n    by_tier:\n      pro: 0.9\n")
    assert aisia("validate", "--strict", path)[0] == 0
    prior = load_policy([path]).quality.prior
    tiers = {t: prior_quality(Deployment(t, t, f"x/{t}", "x", tier=t), None, prior)
             for t in ("ultra", "pro", "standard", "free")}
    assert tiers == {"ultra": 0.85, "pro": 0.9, "standard": 0.65, "free": 0.55}


def test_a_prior_variance_validate_accepts_decides_and_learns(aisia, write_file):
    # 1e-320 validated and made the next decision raise once an outcome was learned (1 / it is
    # inf): the schema's floor is 1e-6, which decides and learns. (Found by a review.)
    from aisia_plugin.decision import Deployment
    from aisia_plugin.engine import Engine
    from aisia_plugin.outcome import Outcome
    from aisia_plugin.policy import load_policy

    tiny = write_file("version: 1\naliases:\n  auto:\n    contextual:\n      prior_variance: 1.0e-320\n", "tiny.yaml")
    code, out, _ = aisia("validate", tiny)
    assert code == 1 and f"{tiny}:5:" in out and "aliases.auto.contextual.prior_variance" in out, out
    floor = write_file("version: 1\naliases:\n  auto:\n    contextual:\n      prior_variance: 1.0e-6\n", "floor.yaml")
    assert aisia("validate", "--strict", floor)[0] == 0
    engine = Engine(load_policy([floor]))
    deps = [Deployment("a", "a", "openai/a", "openai"), Deployment("b", "b", "openai/b", "openai")]
    for i in range(5):
        d = engine.decide("auto", [{"role": "user", "content": f"hello world number {i}"}], deps)
        engine.record(d, Outcome(d.deployment_id, True, quality=1.0))
    assert engine.decide("auto", [{"role": "user", "content": "hello"}], deps).deployment_id in ("a", "b")


def test_a_judges_default_language_needs_instructions_and_a_default_rubric(aisia, write_file):
    # judging.rubric_for falls back to the default language's 'default' rubric: a default language
    # without one would grade nothing in a language of no rubric of its own. (Found by a review.)
    path = write_file("""\
        version: 1
        quality:
          judge:
            deployment: gpt-4o
            default_language: nl
            languages:
              nl:
                instructions: 'Beoordeel het antwoord. Antwoord met {"score": N}.'
        """)
    code, out, _ = aisia("validate", path)
    assert code == 1 and f"{path}:7:" in out and "quality.judge.languages.nl: the default language 'nl' needs" in out, out
    path.write_text(path.read_text() + "        rubrics: {default: 'Is het juist?'}\n")
    assert aisia("validate", "--strict", path)[0] == 0


def test_a_setting_a_layers_strategy_does_not_read_is_warned_at_the_layers_line(aisia, write_file):
    # As for the operator's alias: the layer's alias as it takes effect (the operator's strategy,
    # or the layer's own), the warning at the line the layer wrote. (Found by a review.)
    team = write_file("version: 1\nteams:\n  t1:\n    aliases:\n      auto:\n        exploration_c: 2.0\n"
                      "      auto/fast:\n        strategy: ucb1\n        exploration_c: 2.0\n", "team.yaml")
    code, out, _ = aisia("validate", "--strict", team)
    assert code == 1, out
    assert f"{team}:6:9: teams.t1.aliases.auto.exploration_c: warning: has no effect: strategy 'contextual'" in out
    assert "auto/fast.exploration_c" not in out  # ucb1 reads it
    assert aisia("validate", team)[0] == 0  # a warning, not an error


def test_a_contextual_section_a_non_contextual_alias_cannot_decide_with_is_warned(aisia, write_file):
    # auto/fast (latency) never reads its section's tolerance, exploration or cold start; its
    # prior_model and variances are read whatever the strategy (the shared models' seed, aisia
    # train), so they pass. The same in a team's layer, and on a contextual alias nothing is said.
    path = write_file("version: 1\naliases:\n  auto/fast:\n    contextual:\n      quality_tolerance: 0.1\n"
                      "      prior_variance: 0.5\n      cold_start: {count: 3}\n  auto:\n    contextual:\n"
                      "      quality_tolerance: 0.1\nteams:\n  t1:\n    aliases:\n      auto/cheap:\n"
                      "        contextual: {exploration: 0.5}\n", "p.yaml")
    code, out, _ = aisia("validate", "--strict", path)
    assert code == 1, out
    assert out.splitlines()[:3] == [
        f"{path}:5:7: aliases.auto/fast.contextual.quality_tolerance: warning: has no effect: strategy 'latency' does "
        "not read the contextual section's quality_tolerance (only the contextual strategy decides with it; "
        "prior_model, prior_variance and noise_variance are read whatever the strategy); remove it, or choose "
        "strategy contextual",
        f"{path}:7:7: aliases.auto/fast.contextual.cold_start: warning: has no effect: strategy 'latency' does not "
        "read the contextual section's cold_start (only the contextual strategy decides with it; prior_model, "
        "prior_variance and noise_variance are read whatever the strategy); remove it, or choose strategy contextual",
        f"{path}:15:22: teams.t1.aliases.auto/cheap.contextual.exploration: warning: has no effect: strategy 'cost' "
        "does not read the contextual section's exploration (only the contextual strategy decides with it; "
        "prior_model, prior_variance and noise_variance are read whatever the strategy); remove it, or choose "
        "strategy contextual"], out
    assert "prior_variance: warning" not in out and "aliases.auto.contextual" not in out
    assert aisia("validate", path)[0] == 0  # a warning, not an error


def test_removing_a_lexicon_entry_the_shipped_lexicons_do_not_have_is_warned(aisia, write_file):
    # `thank: null` (meant: the shipped `thanks`) removed nothing, with no word, and `thanks`
    # kept firing. (Found by a review.)
    path = write_file("version: 1\nsignals:\n  lexicons:\n    en:\n      satisfaction:\n        thank: null\n")
    code, out, _ = aisia("validate", "--strict", path)
    assert code == 1 and f"{path}:6:9: signals.lexicons.en.satisfaction.thank: warning: removes nothing: the " \
                          "shipped lexicons have no en satisfaction entry 'thank'; did you mean 'thanks'?" in out, out
    path.write_text("version: 1\nsignals:\n  lexicons:\n    en:\n      satisfaction:\n        thanks: null\n")
    assert aisia("validate", "--strict", path)[0] == 0


def test_lexicons_over_re2s_memory_budget_are_blamed_on_the_largest_entry_at_its_line(aisia, write_file):
    # Before, the last entry compiled was named: a shipped one of another language, in a file the
    # operator never touched. (Found by a review.)
    lines = ["version: 1", "signals:", "  lexicons:", "    en:", "      correction:"]
    lines += [f"        big{i}: '\\bw{i}x[^.!?\\n]{{0,{970 + i}}}\\bq{i}[^.!?\\n]{{0,1000}}\\bz{i}'" for i in range(30)]
    path = write_file("\n".join(lines) + "\n", "team.yaml")
    code, out, _ = aisia("validate", path)
    assert code == 1 and f"{path}:35:9: signals.lexicons.en.correction.big29: the signal patterns do not fit" in out, out


def test_a_name_yaml_reads_as_a_boolean_says_to_quote_it(aisia, write_file):
    # Norwegian's code, `no:`, is YAML's false: the error says why the name reads 'False'.
    path = write_file("version: 1\nsignals:\n  lexicons:\n    no:\n      correction:\n        feil: '\\bdet er feil\\b'\n")
    code, out, _ = aisia("validate", path)
    assert code == 1 and f"{path}:4:5: signals.lexicons.False: invalid name 'False'" in out
    assert "YAML reads an unquoted no, yes, on or off as a boolean: quote the name ('no')" in out
    path.write_text(path.read_text().replace("    no:", "    'no':"))
    assert aisia("validate", path)[0] == 0
