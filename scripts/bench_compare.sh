#!/usr/bin/env bash
# Warm hits: pulsys against nginx (static and proxy_cache), Varnish and olah, in one run.
# Installs what the run needs, then runs scripts/bench_compare.py with the arguments given
# (see docs/benchmarks.md), then renders charts and results/headline.json:
#
#   bash scripts/bench_compare.sh                 # full default run (~30 min on 2 CPUs)
#   bash scripts/bench_compare.sh --quick         # a few minutes
#   bash scripts/bench_compare.sh --servers pulsys-portable,nginx-static --sizes 4K --duration 2
#   bash scripts/bench_compare.sh --cold          # the cold section (issue 17; ~5 min)
#   bash scripts/bench_compare.sh --xet           # hf_xet through --xet facade (issue 19)
#
# What it installs: pulsys into ./.venv (as scripts/serve.sh does); as root, the Debian
# packages nginx, varnish, wrk and gcc when missing (`apt-get update` once first); olah
# (PyPI) into its own venv and matplotlib into a bench venv, both under
# ~/.cache/pulsys-bench (PULSYS_BENCH_HOME), never inside the repository. A peer that
# cannot be installed is recorded as "unavailable: <reason>" and the run goes on.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/venv.sh
ensure_venv
pip_log="$(mktemp)"
if ! .venv/bin/python -m pip install -q -e . >"$pip_log" 2>&1; then
    cat "$pip_log" >&2
    rm -f "$pip_log"
    echo "bench_compare: error: installing pulsys into .venv failed" >&2
    exit 1
fi
rm -f "$pip_log"

say() { echo "bench_compare.sh: $*" >&2; }
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

# Debian packages: command -> package
missing=()
for pair in nginx:nginx varnishd:varnish wrk:wrk cc:gcc taskset:util-linux; do
    have "${pair%%:*}" || missing+=("${pair#*:}")
done
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing Debian packages: ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || say "apt-get update failed"
        for pkg in "${missing[@]}"; do
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null 2>&1 \
                || say "apt-get install $pkg failed; it will be reported unavailable"
        done
    else
        say "missing (not root or no apt-get, not installing): ${missing[*]}; those peers will be reported unavailable"
    fi
fi

# Opt-in: PULSYS_BENCH_LIBURING_WHEEL=<wheel> replaces the liburing binding in ./.venv with
# that wheel before the run, e.g. one built by scripts/build_liburing.sh for a CPU without
# AVX-512, where the PyPI wheel dies of SIGILL (docs/benchmarks.md). The JSON records the
# wheel's tag in each liburing peer's version. The wheel stays in ./.venv afterwards (it meets
# setup.cfg's liburing>=2026.3.30); `pip install --force-reinstall liburing==2026.3.30` undoes it.
if [ -n "${PULSYS_BENCH_LIBURING_WHEEL:-}" ]; then
    say "installing liburing from $PULSYS_BENCH_LIBURING_WHEEL into .venv"
    .venv/bin/python -m pip install -q --force-reinstall --no-deps "$PULSYS_BENCH_LIBURING_WHEEL" \
        || { say "error: installing $PULSYS_BENCH_LIBURING_WHEEL failed"; exit 1; }
fi

BENCH_HOME="${PULSYS_BENCH_HOME:-$HOME/.cache/pulsys-bench}"
export PULSYS_BENCH_HOME="$BENCH_HOME"
mkdir -p "$BENCH_HOME"
PY="${PULSYS_PYTHON:-python3}"

# olah in a venv of its own (its dependencies must not meet pulsys's)
if ! [ -x "$BENCH_HOME/olah-venv/bin/olah-cli" ]; then
    say "installing olah (PyPI) into $BENCH_HOME/olah-venv"
    rm -rf "$BENCH_HOME/olah-venv"
    { "$PY" -m venv "$BENCH_HOME/olah-venv" && "$BENCH_HOME/olah-venv/bin/pip" install -q olah; } >/dev/null 2>&1 \
        || say "installing olah failed; it will be reported unavailable"
fi

# matplotlib for the charts: bench-only, never a pulsys dependency
render=()
if ! "$BENCH_HOME/venv/bin/python" -c 'import matplotlib' >/dev/null 2>&1; then
    say "installing matplotlib into $BENCH_HOME/venv"
    rm -rf "$BENCH_HOME/venv"
    { "$PY" -m venv "$BENCH_HOME/venv" && "$BENCH_HOME/venv/bin/pip" install -q matplotlib; } >/dev/null 2>&1 \
        || say "installing matplotlib failed; no charts this time (scripts/render_bench.py can be run later)"
fi
if "$BENCH_HOME/venv/bin/python" -c 'import matplotlib' >/dev/null 2>&1; then
    render=(--render-with "$BENCH_HOME/venv/bin/python")
fi

# --cold: the cold section instead (issue 17): scripts/bench_cold.py on tmpfs, on disk, eight
# files at once, a CDN paced at 50 MB/s per connection (curl, and hf_transfer at 50 and 5
# MB/s), the TTFB of thirty small cold files one after another, the floor under a cold
# byte, and one chart of them all (results/<machine>/cold_<date>.svg). hf_transfer (PyPI)
# goes into a venv of its own under $BENCH_HOME.
if [ "${1:-}" = "--cold" ]; then
    shift
    day="$(date -u +%F)"
    disk="${PULSYS_BENCH_DISK:-/var/tmp/pulsys-bench}"
    mkdir -p "$disk"
    hft="$BENCH_HOME/hf-transfer-venv/bin/python"
    if ! "$hft" -c 'import hf_transfer' >/dev/null 2>&1; then
        say "installing hf_transfer (PyPI) into $BENCH_HOME/hf-transfer-venv"
        rm -rf "$BENCH_HOME/hf-transfer-venv"
        { "$PY" -m venv "$BENCH_HOME/hf-transfer-venv" && "$BENCH_HOME/hf-transfer-venv/bin/pip" install -q hf_transfer==0.1.9; } \
            >/dev/null 2>&1 || { say "installing hf_transfer failed"; exit 1; }
    fi
    runs=(
        "tmpfs:--size-mib 512 --rounds 3"
        "disk:--size-mib 512 --rounds 3 --cache-root $disk"
        "8files:--size-mib 128 --files 8 --rounds 3"
        "paced:--size-mib 1024 --pace-mbps 50 --rounds 2 --servers direct,nginx-proxy-cache,pulsys,pulsys-1-fetcher"
        "hftransfer_paced:--client hf_transfer --hf-transfer-python $hft --size-mib 1024 --pace-mbps 50 --rounds 3 --servers direct,pulsys"
        "hftransfer_slowcdn:--client hf_transfer --hf-transfer-python $hft --size-mib 256 --pace-mbps 5 --rounds 3 --servers direct,pulsys"
        "ttfb:--size-mib 1 --files 30 --one-at-a-time --rounds 3"
    )
    made=()
    for run in "${runs[@]}"; do
        name="cold_${run%%:*}_$day.json"
        # shellcheck disable=SC2086
        .venv/bin/python scripts/bench_cold.py ${run#*:} --name "$name" "$@" || exit 1
        made+=("$(.venv/bin/python -c 'import sys; sys.path.insert(0, "scripts"); import provenance, os; print(os.path.join("results", provenance.machine_label()))')/$name")
    done
    .venv/bin/python scripts/bench_cold_floor.py --name "cold_floor_$day.json" || exit 1
    if [ "${#render[@]}" -gt 0 ]; then
        "${render[1]}" scripts/render_cold.py "${made[@]}" --out "${made[0]%/*}/cold_$day.svg"
    fi
    exit 0
fi

# --xet: hf_xet through pulsys --xet facade (issue 19): scripts/bench_xet.py, unpaced and with
# the CAS pacing each connection at 50 MB/s. The huggingface_hub 2.x + hf_xet client venv is
# the test suite's (built from PyPI under ~/.cache/pulsys-test-venvs when missing).
if [ "${1:-}" = "--xet" ]; then
    shift
    day="$(date -u +%F)"
    client="$(.venv/bin/python -c 'from tests.integration.clients import client_venv; print(client_venv("latest").bin("python"))')" \
        || { say "building the huggingface_hub 2.x client venv failed"; exit 1; }
    .venv/bin/python scripts/bench_xet.py --client-python "$client" --out "xet_$day.json" "$@" || exit 1
    .venv/bin/python scripts/bench_xet.py --client-python "$client" --pace-mbps 50 --out "xet_paced_$day.json" "$@" || exit 1
    exit 0
fi

exec .venv/bin/python scripts/bench_compare.py "${render[@]}" "$@"
