# Sourced by scripts/serve.sh and scripts/test.sh: make ./.venv with Python >= 3.11.
# On a fresh Debian, `python3 -m venv` needs the python3-venv package; install it when
# running as root, otherwise say exactly what is missing.

ensure_venv() {
    local py="${PULSYS_PYTHON:-python3}"
    if ! command -v "$py" >/dev/null 2>&1; then
        echo "pulsys: error: $py not found; install Python 3.11 or newer" >&2
        exit 1
    fi
    if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        echo "pulsys: error: $("$py" -V 2>&1) is too old; pulsys needs Python 3.11 or newer" >&2
        exit 1
    fi
    if [ -x .venv/bin/python ] && .venv/bin/python -m pip --version >/dev/null 2>&1; then
        return 0
    fi
    rm -rf .venv
    if ! "$py" -m venv .venv >/dev/null 2>&1; then
        rm -rf .venv
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "pulsys: installing python3-venv (Debian package) ..." >&2
            DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
            "$py" -m venv .venv
        else
            echo "pulsys: error: '$py -m venv' failed; on Debian/Ubuntu run: sudo apt-get install python3-venv" >&2
            exit 1
        fi
    fi
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
}
