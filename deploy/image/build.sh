#!/usr/bin/env bash
# Builds the gateway image with podman (or docker: --engine docker).
#   build.sh                        on python:3.11-slim-bookworm (a registry must be reachable)
#   build.sh --base debootstrap     on a Debian bookworm made here with debootstrap (no registry)
#   build.sh --base IMAGE           on any image with Python 3.11+ and apt
# Options: --tag NAME (default localhost/kafscale:<version>), --mirror URL (debootstrap's).
# Prints the image's name, size and build time.
set -euo pipefail
cd "$(dirname "$0")/../.."

base="docker.io/library/python:3.11-slim-bookworm"
engine="podman"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)"
tag="localhost/kafscale:$version"
mirror="http://deb.debian.org/debian"
while [ $# -gt 0 ]; do
    case "$1" in
        --base) base="$2"; shift 2 ;;
        --tag) tag="$2"; shift 2 ;;
        --engine) engine="$2"; shift 2 ;;
        --mirror) mirror="$2"; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
started=$(date +%s)

if [ "$base" = "debootstrap" ]; then
    base="localhost/kafscale-base:bookworm"
    if ! "$engine" image exists "$base" 2>/dev/null; then
        rootfs="$(mktemp -d)"
        trap 'rm -rf "$rootfs"' EXIT
        echo "debootstrapping Debian bookworm (python3, ca-certificates) from $mirror" >&2
        debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$mirror" >/dev/null
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        tar -C "$rootfs" -c . | "$engine" import --change 'CMD ["/bin/bash"]' - "$base" >/dev/null
    fi
fi

# A package index behind a TLS-intercepting proxy: hand pip the host's CA bundle.
cert_args=()
host_bundle="$(python3 -c 'import configparser, os; c = configparser.ConfigParser(); c.read(["/etc/pip.conf", os.path.expanduser("~/.config/pip/pip.conf")]); print(c.get("global", "cert", fallback=""))')"
if [ -n "$host_bundle" ] && [ -f "$host_bundle" ]; then
    cert_args=(--volume "$host_bundle:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
fi
"$engine" build --quiet --file deploy/image/Containerfile --build-arg "BASE=$base" "${cert_args[@]}" --tag "$tag" . >/dev/null
size="$("$engine" image inspect "$tag" --format '{{.Size}}')"
echo "built $tag on $base: $((size / 1000000)) MB in $(( $(date +%s) - started )) s"
