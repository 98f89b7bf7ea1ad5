#!/usr/bin/env bash
# Install everything the pinguard tests need on a fresh Debian 12 machine, idempotently:
# the container tools the tests start themselves (buildah, podman, skopeo, Debian's
# docker-registry, debootstrap, htpasswd from apache2-utils, openssl, redis-server (the fleet's
# shared cache and Celery broker), and Debian's headless
# chromium + chromium-driver for the HTML report's browser tests), then a .venv at the
# repository root with pinguard installed editable plus its [test] extra (which takes in
# [sbom] and the schema validators: the tests write and validate every SBOM). Packages already
# present are not reinstalled; the venv is refreshed only when pyproject.toml changes.
# Needs root (or sudo) for apt; the tests themselves run buildah/podman as root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=(sudo); else
    echo "test-setup: run as root (or install sudo)" >&2
    exit 1
  fi
fi

# tool on PATH -> Debian package providing it
declare -A PACKAGE_FOR=(
  [buildah]=buildah
  [podman]=podman
  [skopeo]=skopeo
  [docker-registry]=docker-registry
  [debootstrap]=debootstrap
  [htpasswd]=apache2-utils
  [openssl]=openssl
  [python3]=python3
  [tar]=tar
  [chromium]=chromium
  [chromedriver]=chromium-driver
  [gcc]=gcc            # native-library tests build real shared objects
  [readelf]=binutils   # ... and check them against readelf -d
  [dpkg-deb]=dpkg      # ... and package one as a real .deb
  [redis-server]=redis-server  # the fleet tests: shared layer cache and Celery broker
)
missing=()
for tool in "${!PACKAGE_FOR[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${PACKAGE_FOR[$tool]}")
done
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
[ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || missing+=(debian-archive-keyring)
[ -e /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)

if [ "${#missing[@]}" -gt 0 ]; then
  echo "test-setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update
  "${SUDO[@]}" apt-get install -y "${missing[@]}"
fi

# Debian's docker-registry package enables a service on :5000; the tests start their own
# registries on ephemeral ports, so keep the packaged one off.
if [ -e /lib/systemd/system/docker-registry.service ] && [ -d /run/systemd/system ]; then
  "${SUDO[@]}" systemctl disable --now docker-registry.service >/dev/null 2>&1 || true
elif [ -x /etc/init.d/docker-registry ]; then
  "${SUDO[@]}" /etc/init.d/docker-registry stop >/dev/null 2>&1 || true
  "${SUDO[@]}" update-rc.d docker-registry disable >/dev/null 2>&1 || true
fi

# Likewise Debian's redis-server enables a service on :6379; the fleet tests start their own.
if [ -e /lib/systemd/system/redis-server.service ] && [ -d /run/systemd/system ]; then
  "${SUDO[@]}" systemctl disable --now redis-server.service >/dev/null 2>&1 || true
elif [ -x /etc/init.d/redis-server ]; then
  "${SUDO[@]}" /etc/init.d/redis-server stop >/dev/null 2>&1 || true
  "${SUDO[@]}" update-rc.d redis-server disable >/dev/null 2>&1 || true
fi

# The Python side: .venv with pinguard editable and the test extras.
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python - <<'PY'
import sys
if sys.version_info < (3, 10):
    sys.exit(f".venv has Python {sys.version.split()[0]}; pinguard needs 3.10+ (remove .venv, set PYTHON)")
PY
stamp=.venv/.pinguard-test-setup
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ] \
  || ! .venv/bin/python -c 'import pinguard, pytest, jsonschema, cyclonedx, spdx_tools' >/dev/null 2>&1; then
  .venv/bin/python -m pip install --disable-pip-version-check -q -e '.[test]'
  echo "$want" >"$stamp"
fi
echo "test-setup: ready" >&2
