"""Rules of the house that no other test would notice breaking (issue 11, the house)."""

from __future__ import annotations

import ast
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


# -- the import graph: no circles, no arrow up (issue 23) ------------------------------------------
# The layers, top to bottom. A module imports only from its own layer or the layers below it; a
# name ending in ".*" is a package and everything in it. Every module of aisia_plugin/ and
# benchmarks/ must be in exactly one layer (a new module is placed here on purpose).
LAYERS = (
    ("benchmarks: scripts over the whole package, never imported by it", ("benchmarks.*",)),
    ("entry points: the CLI, its commands, the LiteLLM adapter and what it serves, the demo",
     ("aisia_plugin.cli", "aisia_plugin.commands.*", "aisia_plugin.litellm.*", "aisia_plugin.demo.*",
      "aisia_plugin.ui", "aisia_plugin.metrics", "aisia_plugin.decision_log")),
    ("the engine, and the offline replay that drives it", ("aisia_plugin.engine", "aisia_plugin.replay.*")),
    ("strategies, state, policy, and the contracts and records between them",
     ("aisia_plugin.strategies.*", "aisia_plugin.state.*", "aisia_plugin.policy.*", "aisia_plugin.plugins",
      "aisia_plugin.hookspecs", "aisia_plugin.interfaces", "aisia_plugin.deployments", "aisia_plugin.learning",
      "aisia_plugin.outcome", "aisia_plugin.weights", "aisia_plugin.task_fitness", "aisia_plugin.contextual_io",
      "aisia_plugin.signals", "aisia_plugin.conversation", "aisia_plugin.signal_eval", "aisia_plugin.judging")),
    ("the pure core", ("aisia_plugin", "aisia_plugin.features", "aisia_plugin.domains", "aisia_plugin.domain_eval",
                       "aisia_plugin.scan",
                       "aisia_plugin.breaker", "aisia_plugin.bandit", "aisia_plugin.contextual",
                       "aisia_plugin.numbers", "aisia_plugin.decision", "aisia_plugin.re2compat",
                       "aisia_plugin.globs", "aisia_plugin.resources", "aisia_plugin.schema_defaults",
                       "aisia_plugin.pacing", "aisia_plugin.quality", "aisia_plugin.blame", "aisia_plugin.key_share",
                       "aisia_plugin.capabilities", "aisia_plugin.confidence", "aisia_plugin.local_first",
                       "aisia_plugin.answer_time")),
)

def _module_files() -> dict[str, Path]:
    files = sorted([*PACKAGE.rglob("*.py"), *(REPO / "benchmarks").glob("*.py")])
    names = {}
    for p in files:
        parts = list(p.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = p
    return names


def _imported(module: str, path: Path, node, modules) -> list[str]:
    """The modules of the graph an import statement names. Relative imports are resolved;
    ``from pkg import sub`` names the submodule when there is one, else the package; the
    benchmarks import each other by bare name (their folder is on sys.path)."""
    def local(name: str) -> str:
        if module.startswith("benchmarks.") and f"benchmarks.{name.split('.')[0]}" in modules:
            return f"benchmarks.{name}"
        return name

    if isinstance(node, ast.Import):
        targets = [local(a.name) for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            package = package[:len(package) - (node.level - 1)]
            base = ".".join(package + ([base] if base else []))
        else:
            base = local(base)
        targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    found = []
    for name in targets:
        while name not in modules and "." in name:  # a name inside a module: the module
            name = name.rsplit(".", 1)[0]
        if name in modules and name != module:
            found.append(name)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of aisia_plugin/ and benchmarks/ it imports: every import statement
    of its source, at any depth (in functions, under ``if TYPE_CHECKING:``)."""
    modules = _module_files()
    graph = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[module] = {target for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                         for target in _imported(module, path, node, modules)}
    return graph


def layer_of(module: str) -> int:
    """The index of the module's layer in LAYERS (0 is the top)."""
    hits = [i for i, (_, members) in enumerate(LAYERS) for m in members
            if module == m or (m.endswith(".*") and (module == m[:-2] or module.startswith(m[:-1])))]
    assert len(hits) == 1, f"{module} is in {len(hits)} layers of tests/test_house.py LAYERS (place it in one)"
    return hits[0]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative), each sorted: every circle of imports lies inside one."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_import_graph_is_read_from_the_sources():
    """The graph the two checks below walk holds the imports that exist (a parser that found
    none would pass them vacuously): relative, bare benchmark names, inside functions."""
    graph = import_graph()
    assert "aisia_plugin.bandit" in graph["aisia_plugin.decision"]  # from .bandit import ...
    assert "aisia_plugin.breaker" in graph["aisia_plugin.state.records"]  # from ..breaker import ...
    assert "aisia_plugin.state.redis" in graph["aisia_plugin.state"]  # inside open_store()
    assert "benchmarks.convert_data" in graph["benchmarks.run_all"]  # import convert_data
    assert len(graph) > 80


def test_no_import_circles():
    assert cycles(import_graph()) == []


def test_no_import_from_a_lower_layer_to_a_higher_one():
    graph = import_graph()
    upward = [f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
              for m in sorted(graph) for t in sorted(graph[m]) if layer_of(t) < layer_of(m)]
    assert upward == []
