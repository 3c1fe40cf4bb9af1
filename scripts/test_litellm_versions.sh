#!/usr/bin/env bash
# Run the LiteLLM-touching tests against given LiteLLM versions, each in a venv of its own.
#
#   scripts/test_litellm_versions.sh 1.108.0 1.108.7          # proxy end to end: litellm[proxy]==VERSION
#   scripts/test_litellm_versions.sh --router-only 1.110.2    # the Router-level suite on a plain litellm==VERSION
#   scripts/test_litellm_versions.sh 1.108.7 -- -x            # after --: extra pytest arguments
#
# Two levels. By default (proxy end to end) each VERSION gets the venv
# $AISIA_VERSIONS_DIR/venv-litellm-VERSION (default /tmp) with this checkout editable, its
# test-tools extra and `litellm[proxy]==VERSION`, and runs PROXY_MODULES: a real proxy process per
# module. With --router-only (for the versions whose [proxy] extra does not resolve here: 1.109's
# pins litellm-proxy-extras==0.4.113, 1.110's needs the separate litellm-proxy package) the venv
# is venv-litellm-VERSION-router with a plain `litellm==VERSION` (no proxy installed), and
# ROUTER_MODULES run: a real litellm.Router in this process with the plugin as its callback, in
# front of simulated upstreams over HTTP. pip refuses a version outside pyproject.toml's declared
# range. The script checks that this exact version is the one installed, then runs the modules
# from the repository root with that venv's python. The project's own .venv is never touched. A
# fresh venv takes about a minute (~750 MB with the proxy); the proxy tests 2-3 minutes, the
# Router-level ones well under one. Needs redis-server on PATH (the worker tests start their own).
# Prints one summary line per version and exits non-zero when any version failed to install or
# had a failing test.
set -uo pipefail
cd "$(dirname "$0")/.."

PROXY_MODULES=(tests/test_litellm_plugin*.py tests/test_litellm_stream_first_chunk.py tests/test_demo.py
               tests/test_litellm_observability.py tests/test_faults_proxy.py tests/test_security.py
               tests/test_litellm_request_path.py tests/test_litellm_router_contract.py
               tests/test_litellm_router_attempts.py)
ROUTER_MODULES=(tests/test_litellm_router_contract.py tests/test_litellm_router_attempts.py
                tests/test_litellm_plugin_events.py)

level=proxy
versions=()
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    --router-only) level=router; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) versions+=("$1"); shift ;;
  esac
done
extra=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  echo "usage: $0 [--router-only] VERSION [VERSION...] [-- PYTEST-ARGS...]" >&2
  exit 2
fi

dir="${AISIA_VERSIONS_DIR:-/tmp}"
summary=()
status=0
for v in "${versions[@]}"; do
  if [ "$level" = router ]; then
    venv="$dir/venv-litellm-$v-router" requirement="litellm==$v" modules=("${ROUTER_MODULES[@]}")
    log="$dir/litellm-$v-router-install.log" out="$dir/litellm-$v-router-pytest.log" label="$v (Router only)"
  else
    venv="$dir/venv-litellm-$v" requirement="litellm[proxy]==$v" modules=("${PROXY_MODULES[@]}")
    log="$dir/litellm-$v-install.log" out="$dir/litellm-$v-pytest.log" label="$v (proxy end to end)"
  fi
  echo "== $requirement in $venv"
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" || { summary+=("$label: could not create the venv"); status=1; continue; }
  fi
  if ! "$venv/bin/python" -m pip install -e '.[test-tools]' "$requirement" >"$log" 2>&1; then
    grep -v "is ignored" "$log" | tail -n 15
    summary+=("$label: does not install here (pip's log: $log)")
    status=1
    continue
  fi
  got="$("$venv/bin/python" -c 'from importlib.metadata import version; print(version("litellm"))')"
  if [ "$got" != "$v" ]; then
    summary+=("$label: installed litellm $got instead")
    status=1
    continue
  fi
  "$venv/bin/python" -m pytest -p no:warnings "${modules[@]}" ${extra[@]+"${extra[@]}"} 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  # pytest's closing line: "3 failed, 80 passed, 1 skipped in 95.12s" (= signs around it without -q)
  last="$(grep -E '^=* *[0-9]+ (passed|failed|errors?|skipped|deselected)(, [0-9]+ [a-z]+)* in [0-9.]+s' "$out" \
          | tail -n 1 | sed 's/=//g; s/^ *//; s/ *$//')"
  summary+=("$label: ${last:-no pytest summary (exit $rc)}")
  [ "$rc" -eq 0 ] || status=1
done

echo
echo "== litellm versions"
printf '%s\n' "${summary[@]}"
exit $status
