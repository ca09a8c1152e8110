#!/bin/sh
# Make Debian's Chromium available for the dashboard's browser test (driven by
# playwright-core; never a test tool's own browser download). Idempotent; does
# nothing when /usr/bin/chromium exists. Installs with apt-get when run as root.
set -eu
if [ -x /usr/bin/chromium ]; then
  echo "[chromium] $(/usr/bin/chromium --version 2>/dev/null | head -1)"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "[chromium] not installed and cannot install it here (needs root and apt-get); the browser test will skip unless BB_REQUIRE_DOCKER=1" >&2
  exit 0
fi
echo "[chromium] installing Debian chromium (about a minute)"
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/tmp/bb-apt-chromium.log 2>&1 || {
  apt-get update -q >/tmp/bb-apt-update.log 2>&1
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/tmp/bb-apt-chromium.log 2>&1
}
echo "[chromium] $(/usr/bin/chromium --version 2>/dev/null | head -1)"
