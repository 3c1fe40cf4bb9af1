#!/usr/bin/env bash
# Run the LiteLLM-touching tests against given litellm[proxy] versions, each in a venv of its own.
#
#   scripts/test_litellm_versions.sh 1.108.0 1.108.7        # the oldest and newest that resolve here
#   scripts/test_litellm_versions.sh 1.108.7 -- -x          # after --: extra pytest arguments
#
# For each VERSION: builds (or reuses) the venv $AISIA_VERSIONS_DIR/venv-litellm-VERSION
# (default /tmp), installs this checkout editable with its test extra and `litellm[proxy]==VERSION`
# (pip refuses a version outside pyproject.toml's declared range), checks that this exact version
# is the one installed, then runs the modules below from the repository root with that venv's
# python (pyproject.toml's addopts make it quiet). The project's own .venv is never touched. A
# fresh venv takes about a minute and ~750 MB; the tests about 2-3 minutes. Needs redis-server on
# PATH (the worker tests start their own). Prints one summary line per version and exits non-zero
# when any version failed to install or had a failing test.
set -uo pipefail
cd "$(dirname "$0")/.."

MODULES=(tests/test_litellm_plugin*.py tests/test_litellm_stream_first_chunk.py tests/test_demo.py
         tests/test_litellm_observability.py tests/test_faults_proxy.py tests/test_security.py)

versions=()
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) versions+=("$1"); shift ;;
  esac
done
extra=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  echo "usage: $0 VERSION [VERSION...] [-- PYTEST-ARGS...]" >&2
  exit 2
fi

dir="${AISIA_VERSIONS_DIR:-/tmp}"
summary=()
status=0
for v in "${versions[@]}"; do
  venv="$dir/venv-litellm-$v"
  log="$dir/litellm-$v-install.log"
  echo "== litellm[proxy]==$v in $venv"
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" || { summary+=("$v: could not create the venv"); status=1; continue; }
  fi
  if ! "$venv/bin/python" -m pip install -e '.[test]' "litellm[proxy]==$v" >"$log" 2>&1; then
    grep -v "is ignored" "$log" | tail -n 15
    summary+=("$v: does not install here (pip's log: $log)")
    status=1
    continue
  fi
  got="$("$venv/bin/python" -c 'from importlib.metadata import version; print(version("litellm"))')"
  if [ "$got" != "$v" ]; then
    summary+=("$v: installed litellm $got instead")
    status=1
    continue
  fi
  out="$dir/litellm-$v-pytest.log"
  "$venv/bin/python" -m pytest -p no:warnings "${MODULES[@]}" ${extra[@]+"${extra[@]}"} 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  # pytest's closing line: "3 failed, 80 passed, 1 skipped in 95.12s" (= signs around it without -q)
  last="$(grep -E '^=* *[0-9]+ (passed|failed|errors?|skipped|deselected)(, [0-9]+ [a-z]+)* in [0-9.]+s' "$out" \
          | tail -n 1 | sed 's/=//g; s/^ *//; s/ *$//')"
  summary+=("$v: ${last:-no pytest summary (exit $rc)}")
  [ "$rc" -eq 0 ] || status=1
done

echo
echo "== litellm versions"
printf '%s\n' "${summary[@]}"
exit $status
