#!/bin/sh
# Build the offline bottle base image from files already on this machine: no registry.
# Contents: node (this machine's /usr/bin/node), busybox (static), git with git-core,
# the shared libraries they link, a uid-1000 user `bottle` with home /home/bottle,
# /workspace and /run/bb.
# Tags: bb-base:<inputs-hash> and bb-base:latest. Skips the build when an image built
# from the same inputs exists. Idempotent. Needs a Docker engine (scripts/ensure-docker.sh).
set -eu
image=${BB_BASE_IMAGE_REPO:-bb-base}

if ! docker info >/dev/null 2>&1; then
  echo "[base-image] no Docker engine answers; skipping (run scripts/ensure-docker.sh)" >&2
  [ "${BB_REQUIRE_DOCKER:-}" = "1" ] && exit 1
  exit 0
fi

if ! command -v busybox >/dev/null 2>&1 || ! busybox --list >/dev/null 2>&1; then
  echo "[base-image] installing busybox-static"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq busybox-static >/dev/null
fi

node_bin=$(command -v node)
git_bin=$(command -v git)
busybox_bin=$(command -v busybox)
git_core=$("$git_bin" --exec-path)

# The inputs that decide the image: this script and the exact binaries it copies.
inputs=$( { cat "$0"; sha256sum "$node_bin" "$git_bin" "$busybox_bin"; } | sha256sum | cut -c1-16)
if docker image inspect "$image:$inputs" >/dev/null 2>&1; then
  docker tag "$image:$inputs" "$image:latest"
  echo "[base-image] $image:$inputs is up to date"
  exit 0
fi

echo "[base-image] building $image:$inputs"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/bin" "$root/bin" "$root/etc" "$root/tmp" "$root/home/bottle" \
  "$root/workspace" "$root/run/bb" "$root/usr/share" "$root/usr/lib"
chmod 1777 "$root/tmp"

cp -L "$node_bin" "$root/usr/bin/node"
cp -L "$git_bin" "$root/usr/bin/git"
mkdir -p "$root$git_core"
cp -a "$git_core/." "$root$git_core/"
[ -d /usr/share/git-core ] && cp -a /usr/share/git-core "$root/usr/share/"
cp -L "$busybox_bin" "$root/bin/busybox"
for applet in $("$busybox_bin" --list); do
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
# Some tools look for these in /usr/bin.
for t in env sh; do [ -e "$root/usr/bin/$t" ] || ln -s /bin/busybox "$root/usr/bin/$t"; done

# Shared libraries of every ELF file copied above, with the dynamic loader.
libs=$(mktemp)
for f in "$node_bin" "$git_bin" "$git_core"/*; do
  [ -f "$f" ] || continue
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' >>"$libs" || true
done
sort -u "$libs" | while read -r lib; do
  [ -n "$lib" ] && cp -L --parents "$lib" "$root/"
done
rm -f "$libs"
[ -d /etc/ssl/certs ] && mkdir -p "$root/etc/ssl" && cp -rL /etc/ssl/certs "$root/etc/ssl/" 2>/dev/null || true

cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
bottle:x:1000:1000:bottle:/home/bottle:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
bottle:x:1000:
nogroup:x:65534:
GROUP
echo 'hosts: files dns' >"$root/etc/nsswitch.conf"
chown -R 1000:1000 "$root/home/bottle" "$root/workspace"

tar -C "$root" -c . | docker import \
  -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
  -c 'ENV HOME=/home/bottle' \
  -c 'USER 1000:1000' \
  -c 'WORKDIR /workspace' \
  -c "LABEL bb.base.inputs=$inputs" \
  - "$image:$inputs" >/dev/null
docker tag "$image:$inputs" "$image:latest"
echo "[base-image] built $image:$inputs ($(docker image inspect -f '{{.Size}}' "$image:$inputs" | awk '{printf "%d MB", $1/1000000}'))"
