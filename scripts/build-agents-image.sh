#!/bin/sh
# Build bb-agents: the offline base image plus the real agent CLIs (Claude Code,
# Codex, pi) installed from the npm registry at pinned versions. Tags
# bb-agents:<inputs-hash> and bb-agents:latest. The npm install is cached in
# $BB_CACHE_DIR (default ~/.cache/bot-bottle) and the image by the hash of its
# inputs (the versions, the base image, docker/agents/), so both happen once per
# change. Needs a Docker engine and the base image (scripts/build-base-image.sh).
set -eu
cd "$(dirname "$0")/.."
CLIS="@anthropic-ai/claude-code@2.1.330 @openai/codex@0.169.0 @mariozechner/pi-coding-agent@0.73.1"
image=${BB_AGENTS_IMAGE_REPO:-bb-agents}
base=${BB_BASE_IMAGE:-bb-base:latest}

if ! docker info >/dev/null 2>&1; then
  echo "[agents-image] no Docker engine answers; skipping (run scripts/ensure-docker.sh)" >&2
  [ "${BB_REQUIRE_DOCKER:-}" = "1" ] && exit 1
  exit 0
fi
base_id=$(docker image inspect --format '{{.Id}}' "$base")
inputs=$( { echo "$CLIS" "$base_id"; cat "$0" docker/agents/Dockerfile docker/agents/bin/*; } | sha256sum | cut -c1-16)
if docker image inspect "$image:$inputs" >/dev/null 2>&1; then
  docker tag "$image:$inputs" "$image:latest"
  echo "[agents-image] $image:$inputs is up to date"
  exit 0
fi
# Older builds of this image only take disk space.
docker image ls "$image" --format '{{.Tag}}' | grep -v -e latest -e "$inputs" | while read -r old; do
  docker rmi "$image:$old" >/dev/null 2>&1 || true
done

cache=${BB_CACHE_DIR:-$HOME/.cache/bot-bottle}/agents-$(echo "$CLIS" | sha256sum | cut -c1-16)
if [ ! -f "$cache/.installed" ]; then
  echo "[agents-image] npm install $CLIS (about 1 GB, cached in $cache)"
  rm -rf "$cache"
  mkdir -p "$cache"
  # Claude Code 2.1.330 declares node >= 22 but its CLI is a native binary; on node 20
  # npm would otherwise pick an older version.
  npm install --prefix "$cache" --no-audit --no-fund --loglevel=error --engine-strict=false $CLIS
  touch "$cache/.installed"
fi

echo "[agents-image] building $image:$inputs from $base"
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp -r docker/agents/Dockerfile docker/agents/bin "$ctx/"
for pair in claude=@anthropic-ai/claude-code codex=@openai/codex pi=@mariozechner/pi-coding-agent; do
  v=$(node -p "require('$cache/node_modules/${pair#*=}/package.json').version")
  sed -i "s/@VERSION@/$v/" "$ctx/bin/${pair%%=*}"
done
# Shared libraries the native CLIs link that the base image lacks (e.g. librt for
# Claude Code), from this machine, at the same paths.
# Bash too: the CLIs' shell tools want a real one (Claude Code refuses busybox sh).
mkdir -p "$ctx/libs/bin"
cp -L "$(command -v bash)" "$ctx/libs/bin/bash"
{ ldd "$cache/node_modules/@anthropic-ai/claude-code-linux-x64/claude"; ldd "$(command -v bash)"; } 2>/dev/null |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
    mkdir -p "$ctx/libs$(dirname "$lib")"
    cp -L "$lib" "$ctx/libs$lib"
  done
# Hard links when the cache is on the same filesystem; a copy otherwise.
cp -al "$cache/node_modules" "$ctx/node_modules" 2>/dev/null || cp -a "$cache/node_modules" "$ctx/node_modules"
DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=$base" -t "$image:$inputs" "$ctx" >/dev/null
docker tag "$image:$inputs" "$image:latest"
echo "[agents-image] $image:$inputs built ($(docker image inspect --format '{{.Size}}' "$image:$inputs" | awk '{printf "%d MB", $1/1000000}'))"
