#!/usr/bin/env bash
# The compose quickstart, one command each:
#   quickstart.sh up     build the gateway image if missing, start everything, wait until both gateways are ready
#   quickstart.sh demo   from the host: produce, consume, and read the bucket with Spark (needs the project's venv)
#   quickstart.sh down   stop everything and remove its volumes
# Uses `docker compose` when there is a Docker engine, else podman-compose. Host ports and the
# images are variables (see compose.yaml): KAFSCALE_PORT_1, KAFSCALE_PORT_2, S3_PORT, ETCD_PORT, ...
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if docker info >/dev/null 2>&1; then
    compose=(docker compose -f "$here/compose.yaml")
    engine=docker
else
    compose=(podman-compose -f "$here/compose.yaml")
    engine=podman
fi
image="${KAFSCALE_IMAGE:-localhost/kafscale:0.1.0}"

wait_ready() {
    local deadline=$((SECONDS + ${KAFSCALE_UP_TIMEOUT:-180}))
    for port in "${KAFSCALE_HTTP_PORT_1:-19094}" "${KAFSCALE_HTTP_PORT_2:-19194}"; do
        until python3 -c "import urllib.request, sys; urllib.request.urlopen('http://127.0.0.1:$port/readyz', timeout=2)" 2>/dev/null; do
            if [ $SECONDS -gt $deadline ]; then
                echo "gateway with HTTP port $port not ready; its logs:" >&2
                "${compose[@]}" logs --tail 50 >&2 || true
                exit 1
            fi
            sleep 1
        done
    done
}

case "${1:-}" in
    up)
        if ! "$engine" image inspect "$image" >/dev/null 2>&1; then
            "$here/../image/build.sh" --engine "$engine" --tag "$image" ${KAFSCALE_IMAGE_BASE:+--base "$KAFSCALE_IMAGE_BASE"}
        fi
        "${compose[@]}" up -d
        wait_ready
        echo "ready: bootstrap 127.0.0.1:${KAFSCALE_PORT_1:-19092},127.0.0.1:${KAFSCALE_PORT_2:-19192}; S3 http://127.0.0.1:${S3_PORT:-18333} (bucket kafscale)"
        ;;
    demo)
        python3 "$here/demo.py"
        ;;
    down)
        "${compose[@]}" down -v
        ;;
    *)
        echo "usage: $0 up|demo|down" >&2
        exit 2
        ;;
esac
