#!/bin/sh
# apt-ensure.sh TAG COMMAND PACKAGE WHAT: make Debian's PACKAGE available when COMMAND is
# missing (idempotent; installs with apt-get when run as root, updating the lists once if
# the first try fails). WHAT names the tests that need it, for the message when it cannot.
set -eu
tag=$1 cmd=$2 pkg=$3 what=$4
if command -v "$cmd" >/dev/null 2>&1 || [ -x "$cmd" ]; then exit 0; fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "[$tag] not installed and cannot install it here (needs root and apt-get); $what will skip unless BB_REQUIRE_DOCKER=1" >&2
  exit 0
fi
echo "[$tag] installing Debian $pkg"
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$pkg" >"/tmp/bb-apt-$pkg.log" 2>&1 || {
  apt-get update -q >/tmp/bb-apt-update.log 2>&1
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$pkg" >"/tmp/bb-apt-$pkg.log" 2>&1
}
