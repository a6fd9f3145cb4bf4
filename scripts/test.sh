#!/usr/bin/env bash
# Installs everything the test suite needs (Python venv, Debian packages, npm
# clients) and runs the whole suite. Fails loudly when anything is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${KAFSCALE_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e '.[test]'

# kcat is a regression client (old librdkafka) for the end-to-end tests.
if ! command -v kcat >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null
    fi
fi

status=0
"$VENV/bin/python" -m pytest "$@" || status=$?
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: failing" >&2
    exit 1
fi
exit "$status"
