#!/usr/bin/env bash
# Make a local Debian bookworm base image with Python 3.11 for machines that reach package mirrors but
# no image registry (air-gapped or proxied sites): debootstrap a minimal root file system and
# `docker import` it. The Parley, redis and scripted-LLM images build FROM it with
# `--build-arg BASE_IMAGE=parley-base:bookworm` (the default stays the official python:3.11-slim-bookworm).
#
#   scripts/make_base_image.sh [TAG]          # default tag parley-base:bookworm; needs root, debootstrap, docker
#
# The Debian mirror is DEBIAN_MIRROR (and DEBIAN_SECURITY_MIRROR) or, when unset, the first one this
# machine's apt already uses, so the image's apt reaches the same mirrors as the host. Nothing of the
# host (certificates, credentials) is copied into the image.
set -euo pipefail

TAG=${1:-parley-base:bookworm}
SUITE=${DEBIAN_SUITE:-bookworm}
DOCKER=${DOCKER:-docker}

host_uri() {  # the first apt URI of this machine whose path ends in $1 ("debian" or "debian-security")
  local want=$1
  {
    grep -hE '^[[:space:]]*URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}'
    grep -hE '^[[:space:]]*deb[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
      | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; break}}'
  } | sed 's:/*$::' | grep -E "/${want}\$" | head -n 1 || true
}

MIRROR=${DEBIAN_MIRROR:-$(host_uri debian)}
SECURITY=${DEBIAN_SECURITY_MIRROR:-$(host_uri debian-security)}
if [ -z "$MIRROR" ]; then
  echo "no Debian mirror found in /etc/apt; set DEBIAN_MIRROR=http://<mirror>/debian" >&2
  exit 2
fi
SECURITY=${SECURITY:-${MIRROR%/debian}/debian-security}

ROOTFS=$(mktemp -d /var/tmp/parley-base.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
start=$(date +%s)

# minbase: essential packages and apt only; python3-venv brings ensurepip, so builds make a venv.
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
  "$SUITE" "$ROOTFS" "$MIRROR"

cat >"$ROOTFS/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
rm -f "$ROOTFS/etc/apt/sources.list"
# Like the official Debian images: no recommended packages, no documentation, no apt caches.
cat >"$ROOTFS/etc/apt/apt.conf.d/90parley-base" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
EOF
# Mirrors that serve a frozen snapshot have an expired Release date; accept it when this host does.
if grep -rqs 'Check-Valid-Until "false"' /etc/apt/apt.conf.d/; then
  echo 'Acquire::Check-Valid-Until "false";' >"$ROOTFS/etc/apt/apt.conf.d/91parley-snapshot"
fi
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/cache/apt/archives/*.deb \
  "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* "$ROOTFS"/var/log/*.log

tar --numeric-owner -C "$ROOTFS" -c . | "$DOCKER" import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' \
  - "$TAG" >/dev/null
echo "$TAG: $("$DOCKER" image inspect --format '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1 / 1e6}'), \
$(($(date +%s) - start)) s ($SUITE from $MIRROR)"
