#!/bin/sh
# Make tmux available for the supervise inbox's terminal test (a real terminal,
# keys sent, the screen read back). Idempotent; installs Debian's tmux with
# apt-get when run as root.
set -eu
if command -v tmux >/dev/null 2>&1; then
  echo "[tmux] $(tmux -V)"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "[tmux] not installed and cannot install it here (needs root and apt-get); the inbox test will skip unless BB_REQUIRE_DOCKER=1" >&2
  exit 0
fi
echo "[tmux] installing Debian tmux"
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends tmux >/tmp/bb-apt-tmux.log 2>&1 || {
  apt-get update -q >/tmp/bb-apt-update.log 2>&1
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends tmux >/tmp/bb-apt-tmux.log 2>&1
}
echo "[tmux] $(tmux -V)"
