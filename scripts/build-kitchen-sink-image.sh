#!/bin/sh
# Build forklift's kitchen-sink image offline: docker/kitchen-sink/offline/Dockerfile
# on top of bb-agents (scripts/build-agents-image.sh), with this machine's make, jq,
# diff, patch and python3 (with its standard library) and the shared libraries they
# link, the user forklift (1000:1000) and the harness. Tags
# forklift/kitchen-sink:offline-<inputs-hash> and forklift/kitchen-sink:offline; skips
# the build when an image from the same inputs exists. The full image (ubuntu:24.04
# and the toolchains) is docker/kitchen-sink/Dockerfile and needs a registry.
set -eu
cd "$(dirname "$0")/.."
image=${FORKLIFT_IMAGE_REPO:-forklift/kitchen-sink}
base=${BB_AGENTS_IMAGE:-bb-agents:latest}

if ! docker info >/dev/null 2>&1; then
  echo "[kitchen-sink] no Docker engine answers; skipping (run scripts/ensure-docker.sh)" >&2
  [ "${BB_REQUIRE_DOCKER:-}" = "1" ] && exit 1
  exit 0
fi
if ! docker image inspect "$base" >/dev/null 2>&1; then
  echo "[kitchen-sink] $base is missing: run scripts/build-agents-image.sh first" >&2
  exit 1
fi
tools=""
for t in make jq diff patch python3; do
  p=$(command -v "$t" 2>/dev/null || true)
  # python3 from the system, not a version manager's shim.
  [ "$t" = python3 ] && p=$( [ -x /usr/bin/python3 ] && readlink -f /usr/bin/python3 || true)
  [ -n "$p" ] && tools="$tools $(readlink -f "$p")"
done
base_id=$(docker image inspect --format '{{.Id}}' "$base")
inputs=$( { echo "$base_id"; cat "$0" docker/kitchen-sink/offline/Dockerfile docker/kitchen-sink/harness/*; for t in $tools; do sha256sum "$t"; done; } | sha256sum | cut -c1-16)
if docker image inspect "$image:offline-$inputs" >/dev/null 2>&1; then
  docker tag "$image:offline-$inputs" "$image:offline"
  echo "[kitchen-sink] $image:offline-$inputs is up to date"
  exit 0
fi
docker image ls "$image" --format '{{.Tag}}' | grep '^offline-' | grep -v "$inputs" | while read -r old; do
  docker rmi "$image:$old" >/dev/null 2>&1 || true
done

echo "[kitchen-sink] building $image:offline-$inputs from $base"
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp docker/kitchen-sink/offline/Dockerfile "$ctx/"
cp -r docker/kitchen-sink/harness "$ctx/harness"
chmod 755 "$ctx/harness/run.sh"
root="$ctx/root"
mkdir -p "$root/usr/bin" "$root/etc" "$root/home/forklift" "$root/opt/forklift"
for t in $tools; do
  name=$(basename "$t")
  cp -L "$t" "$root/usr/bin/$name"
  case "$name" in python3.*)
    ln -sf "$name" "$root/usr/bin/python3"
    ln -sf "$name" "$root/usr/bin/python"
    lib=/usr/lib/$name
    # The standard library without its tests and caches.
    mkdir -p "$root$lib"
    tar -C "$lib" --exclude=test --exclude=__pycache__ --exclude=idlelib --exclude=tkinter -cf - . | tar -C "$root$lib" -xf -
    ;;
  esac
  ldd "$t" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r l; do
    cp -L --parents "$l" "$root/"
  done
done
# The image's user is forklift, uid 1000 (bb-base calls that uid bottle).
cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
forklift:x:1000:1000:forklift:/home/forklift:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
forklift:x:1000:
nogroup:x:65534:
GROUP
chown -R 1000:1000 "$root/home/forklift"
DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=$base" -t "$image:offline-$inputs" "$ctx" >/dev/null
docker tag "$image:offline-$inputs" "$image:offline"
echo "[kitchen-sink] $image:offline-$inputs built ($(docker image inspect --format '{{.Size}}' "$image:offline-$inputs" | awk '{printf "%d MB", $1/1000000}'))"
