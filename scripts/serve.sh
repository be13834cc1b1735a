#!/usr/bin/env bash
# Install pulsys into ./.venv and run the server. Arguments go to pulsys, e.g.
#   bash scripts/serve.sh --listen 0.0.0.0:8080 --cache-dir /srv/pulsys
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/venv.sh
ensure_venv
.venv/bin/python -m pip install -q -e .
exec .venv/bin/python -m pulsys "$@"
