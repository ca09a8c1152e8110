#!/bin/sh
# A plain Debian image for the tests that install Debian packages in a rebuild (apt
# through the build's egress proxy): debootstrap's minbase of bookworm from Debian's
# own mirror, imported as bb-debian:bookworm. Skips the build when the image exists.
# Idempotent. Needs root and a Docker engine (scripts/ensure-docker.sh).
set -eu
image=${BB_DEBIAN_IMAGE:-bb-debian:bookworm}

if ! docker info >/dev/null 2>&1; then
  echo "[debian-image] no Docker engine answers; skipping (run scripts/ensure-docker.sh)" >&2
  [ "${BB_REQUIRE_DOCKER:-}" = "1" ] && exit 1
  exit 0
fi
if docker image inspect "$image" >/dev/null 2>&1; then
  echo "[debian-image] $image is there"
  exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  echo "[debian-image] installing debootstrap"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq debootstrap >/dev/null
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
echo "[debian-image] debootstrap --variant=minbase bookworm (a minute or so)"
debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$root.log" 2>&1 || {
  tail -20 "$root.log" >&2
  exit 1
}
rm -f "$root.log"
# No package lists or caches in the image: a build fetches what it installs.
rm -rf "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"*.bin
tar -C "$root" -c . | docker import -c 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "[debian-image] built $image"
