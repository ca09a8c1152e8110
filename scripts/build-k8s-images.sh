#!/bin/sh
# Build the two images the Kubernetes deployment (packages/backend-kubernetes/deploy/)
# runs, from this checkout's built packages and the offline base image, no registry:
#   $prefix/gate:<hash>          bb-base with bot-bottle's runtime at /opt/bb/runtime
#                                (the gate, the sidecars, the bridge, the script agent)
#   $prefix/orchestrator:<hash>  bb-base with the bb command (`pnpm deploy --prod` of
#                                apps/cli) at /opt/bb/app, and the commands bb and
#                                bb-orchestrator (`bb orchestrate serve`) on PATH
# each also tagged :latest. The agents' image is bb-agents (scripts/build-agents-image.sh),
# or any image with node. Push them where your cluster pulls (docs/guides/kubernetes.md).
# Needs a Docker engine, bb-base (scripts/build-base-image.sh) and a build
# (pnpm turbo run build). Skips an image whose inputs are unchanged. Idempotent.
set -eu
cd "$(dirname "$0")/.."
prefix=${BB_K8S_IMAGE_PREFIX:-bot-bottle}
base=${BB_BASE_IMAGE:-bb-base:latest}

if ! docker info >/dev/null 2>&1; then
  echo "[k8s-images] no Docker engine answers; skipping (run scripts/ensure-docker.sh)" >&2
  [ "${BB_REQUIRE_DOCKER:-}" = "1" ] && exit 1
  exit 0
fi
if ! base_id=$(docker image inspect --format '{{.Id}}' "$base" 2>/dev/null); then
  echo "[k8s-images] the base image $base is missing: run sh scripts/build-base-image.sh first" >&2
  exit 1
fi
if [ ! -f apps/cli/dist/bin.js ] || [ ! -f packages/headless/dist/bundle/bb-gate.mjs ]; then
  echo "[k8s-images] the packages are not built: run pnpm turbo run build first" >&2
  exit 1
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

# build <name> <context dir>: tag $prefix/<name>:<hash of the context and base> and :latest.
build() {
  name=$1 dir=$2
  # pnpm's .modules.yaml records when it ran: not an input.
  hash=$( { echo "$base_id"; cat "$0"; cd "$dir" && find . -type f ! -name .modules.yaml -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-16)
  if docker image inspect "$prefix/$name:$hash" >/dev/null 2>&1; then
    echo "[k8s-images] $prefix/$name:$hash is up to date"
  else
    echo "[k8s-images] building $prefix/$name:$hash"
    # Older builds of this script's (their tags are 16 hex digits) only take disk space.
    docker image ls "$prefix/$name" --format '{{.Tag}}' | grep -E '^[0-9a-f]{16}$' | grep -v "$hash" | while read -r old; do
      docker rmi "$prefix/$name:$old" >/dev/null 2>&1 || true
    done
    out=$(docker build -q -t "$prefix/$name:$hash" "$dir" 2>&1) || { echo "$out" >&2; exit 1; }
  fi
  docker tag "$prefix/$name:$hash" "$prefix/$name:latest"
}

# The gate: the runtime files exactly as a Docker bottle mounts them (prepareRuntime).
mkdir -p "$ctx/gate"
(cd apps/cli && BB_HOME="$ctx/home" node --input-type=module -e '
  import { cpSync } from "node:fs";
  import { prepareRuntime } from "@bb/headless";
  cpSync(prepareRuntime(process.env), process.argv[1], { recursive: true });
' "$ctx/gate/runtime")
cat > "$ctx/gate/Dockerfile" <<EOF
FROM $base
COPY runtime /opt/bb/runtime
USER 1001:1001
EOF
build gate "$ctx/gate"

# The orchestrator: the bb command with its production dependencies alone.
mkdir -p "$ctx/orchestrator"
CI=true pnpm --filter @bb/cli deploy --prod --legacy --prefer-offline "$ctx/orchestrator/app" >/dev/null
# pnpm writes the deploy's node_modules/.bin links to the target's path taken relative to
# the workspace and resolved from apps/cli (a pnpm bug): remove that stray copy.
stray=$(realpath -m "apps/cli/$(realpath -m --relative-to="$PWD" "$ctx")")
case "$stray" in
  "$PWD"/*/tmp.*|"$PWD"/tmp/tmp.*) rm -rf "$stray"; rmdir "$(dirname "$stray")" 2>/dev/null || true ;;
esac
# What runs is dist/ and node_modules/: sources, tests, benchmarks and build files stay out.
rm -rf "$ctx/orchestrator/app/src" "$ctx/orchestrator/app/bench" "$ctx/orchestrator/app/test" \
  "$ctx/orchestrator/app/build" "$ctx/orchestrator/app/scripts" "$ctx/orchestrator/app/.turbo" \
  "$ctx/orchestrator/app"/*.config.ts "$ctx/orchestrator/app"/tsconfig*.json
mkdir -p "$ctx/orchestrator/bin"
printf '#!/bin/sh\nexec node /opt/bb/app/dist/bin.js "$@"\n' > "$ctx/orchestrator/bin/bb"
printf '#!/bin/sh\nexec node /opt/bb/app/dist/bin.js orchestrate serve "$@"\n' > "$ctx/orchestrator/bin/bb-orchestrator"
chmod 755 "$ctx/orchestrator/bin/bb" "$ctx/orchestrator/bin/bb-orchestrator"
cat > "$ctx/orchestrator/Dockerfile" <<EOF
FROM $base
COPY app /opt/bb/app
COPY bin/ /usr/local/bin/
USER 1001:1001
ENTRYPOINT []
CMD ["bb-orchestrator"]
EOF
build orchestrator "$ctx/orchestrator"
