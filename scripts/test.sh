#!/usr/bin/env bash
# Install pulsys with its test dependencies into ./.venv and run the whole test suite.
# Tests that need real components start them themselves (the fake Hub, pulsys, real
# huggingface_hub / hf_transfer clients in venvs of their own built from PyPI).
# Arguments go to pytest, e.g. `bash scripts/test.sh tests/unit -q`.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/venv.sh
ensure_venv
.venv/bin/python -m pip install -q -e '.[test]' || { echo "pulsys: error: installing test dependencies failed" >&2; exit 1; }
# Four test processes at a time (pytest-xdist): most tests wait on sockets, subprocesses
# and real clients, so on 2 CPUs the suite takes ~7.5 min instead of ~13 (measured
# 2026-12-03). PULSYS_TEST_WORKERS=0 runs it in one process.
workers="${PULSYS_TEST_WORKERS:-4}"
xdist=()
if [ "$workers" != 0 ]; then
    xdist=(-n "$workers" --dist loadgroup)
fi
.venv/bin/python -m pytest "${xdist[@]}" "$@"
rc=$?
if [ "$rc" = 5 ]; then
    echo "pulsys: error: pytest collected no tests" >&2
    exit 1
fi
exit "$rc"
