#!/bin/sh
# Make Debian's Chromium available for the dashboard's browser test (driven by
# playwright-core; never a test tool's own browser download). Idempotent; does
# nothing when /usr/bin/chromium exists. Installs with apt-get when run as root.
set -eu
sh "$(dirname "$0")/apt-ensure.sh" chromium /usr/bin/chromium chromium "the browser test"
[ -x /usr/bin/chromium ] && echo "[chromium] $(/usr/bin/chromium --version 2>/dev/null | head -1)" || true
