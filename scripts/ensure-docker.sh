#!/bin/sh
# Bring up a Docker engine on a machine that has none answering.
# - Does nothing when `docker info` already answers.
# - As root: installs docker.io if dockerd is missing, starts dockerd with overlay2
#   (falling back to vfs), no iptables and no default bridge (bottles run with
#   --network none), and waits until it answers.
# - Not root and no engine: says so and exits 0, so Docker tests skip locally
#   (CI sets BB_REQUIRE_DOCKER=1 and they fail instead).
# Idempotent. Log: ${BB_DOCKERD_LOG:-/var/log/bb-dockerd.log}.
set -eu

if docker info >/dev/null 2>&1; then
  exit 0
fi
if [ -n "${DOCKER_HOST:-}" ]; then
  echo "[docker] DOCKER_HOST=$DOCKER_HOST does not answer; not starting a local engine" >&2
  [ "${BB_REQUIRE_DOCKER:-}" = "1" ] && exit 1
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "[docker] no Docker engine answers and this is not root: real-Docker tests will skip" >&2
  [ "${BB_REQUIRE_DOCKER:-}" = "1" ] && exit 1
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
  echo "[docker] installing docker.io"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq docker.io >/dev/null
fi

log=${BB_DOCKERD_LOG:-/var/log/bb-dockerd.log}

start_dockerd() {
  driver=$1
  # A dockerd killed with -9 leaves containerd's pidfile behind; the next start
  # would wait 15 s for a process that is gone.
  pidfile=/var/run/docker/containerd/containerd.pid
  if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then rm -f "$pidfile"; fi
  if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then rm -f /var/run/docker.pid; fi
  echo "[docker] starting dockerd (storage driver $driver)"
  nohup dockerd --storage-driver="$driver" --iptables=false --ip6tables=false --bridge=none \
    >>"$log" 2>&1 &
  i=0
  while [ $i -lt 100 ]; do
    if docker info >/dev/null 2>&1; then
      echo "[docker] engine up ($driver)"
      return 0
    fi
    if ! kill -0 $! 2>/dev/null; then return 1; fi
    sleep 0.2
    i=$((i + 1))
  done
  kill $! 2>/dev/null || true
  return 1
}

start_dockerd overlay2 || start_dockerd vfs || {
  echo "[docker] dockerd did not start; see $log" >&2
  tail -n 20 "$log" >&2 || true
  exit 1
}
