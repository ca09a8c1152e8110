#!/bin/sh
# Build forklift's default image, forklift/kitchen-sink:latest, from
# docker/kitchen-sink/Dockerfile: Debian bookworm's packages (git, build-essential,
# cmake, pkg-config, python3 with pip and venv, Rust, Go, a JDK with Maven, curl, ...)
# from Debian's mirror, Node 20 and npm, and the agent CLIs of bb-agents. No image
# registry is needed: the base is bb-debian:bookworm (scripts/build-debian-image.sh)
# and the CLIs come from bb-agents (scripts/build-agents-image.sh). Tags
# forklift/kitchen-sink:<inputs-hash> and :latest; skips the build when an image from
# the same inputs exists. Needs a Docker engine.
set -eu
cd "$(dirname "$0")/.."
image=${FORKLIFT_IMAGE_REPO:-forklift/kitchen-sink}
debian=${BB_DEBIAN_IMAGE:-bb-debian:bookworm}
agents=${BB_AGENTS_IMAGE:-bb-agents:latest}

if ! docker info >/dev/null 2>&1; then
  echo "[kitchen-sink] no Docker engine answers; skipping (run scripts/ensure-docker.sh)" >&2
  [ "${BB_REQUIRE_DOCKER:-}" = "1" ] && exit 1
  exit 0
fi
for pair in "$debian=scripts/build-debian-image.sh" "$agents=scripts/build-agents-image.sh"; do
  if ! docker image inspect "${pair%%=*}" >/dev/null 2>&1; then
    echo "[kitchen-sink] ${pair%%=*} is missing: run ${pair#*=} first" >&2
    exit 1
  fi
done
npm_dir=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")
ids=$(docker image inspect --format '{{.Id}}' "$debian" "$agents")
inputs=$( { echo "$ids"; cat "$0" docker/kitchen-sink/Dockerfile docker/kitchen-sink/harness/*; cat "$npm_dir/package.json"; } | sha256sum | cut -c1-16)
if docker image inspect "$image:$inputs" >/dev/null 2>&1; then
  docker tag "$image:$inputs" "$image:latest"
  echo "[kitchen-sink] $image:$inputs is up to date"
  exit 0
fi
docker image ls "$image" --format '{{.Tag}}' | grep -v -e '^latest$' -e "^$inputs\$" | while read -r old; do
  docker rmi "$image:$old" >/dev/null 2>&1 || true
done

echo "[kitchen-sink] building $image:$inputs from $debian and $agents (Debian's packages: a few minutes)"
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp docker/kitchen-sink/Dockerfile "$ctx/"
cp -r docker/kitchen-sink/harness "$ctx/harness"
cp -a "$npm_dir" "$ctx/npm"
# The build's steps reach Debian's mirror through the host's network (the engine's
# bridge has no name server here).
log="$ctx.log"
if ! DOCKER_BUILDKIT=0 docker build --network host -q \
  --build-arg "DEBIAN=$debian" --build-arg "AGENTS=$agents" \
  -t "$image:$inputs" "$ctx" >"$log" 2>&1; then
  tail -30 "$log" >&2
  rm -f "$log"
  exit 1
fi
rm -f "$log"
docker tag "$image:$inputs" "$image:latest"
echo "[kitchen-sink] $image:$inputs built ($(docker image inspect --format '{{.Size}}' "$image:$inputs" | awk '{printf "%d MB", $1/1000000}'))"
