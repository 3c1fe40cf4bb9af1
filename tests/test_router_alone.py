"""A Router used alone (its owner installs the aliases with ``ensure_groups``) serves even when
some other code of the process imported LiteLLM's proxy module: the plugin then believes it
runs inside a proxy and its start-up task waits for the proxy's Router, which never comes; a
request must not wait with it (in the full suite an earlier test imports that module, and the
Router-alone tests after it hung)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_a_router_used_alone_serves_when_the_proxy_module_was_imported_elsewhere():
    first = "test_litellm_garbage.py::test_an_alias_request_leaves_nothing_of_the_plugins_to_the_cyclic_collector"
    code = ("import sys, pytest, litellm.proxy.proxy_server; "
            f"sys.exit(pytest.main([{first!r}, '-q', '-p', 'no:cacheprovider', '--timeout=120']))")
    out = subprocess.run([sys.executable, "-c", code], cwd=TESTS, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert out.stdout.lstrip().startswith(".")  # the one test ran and passed (exit 0, not 5: none collected)
