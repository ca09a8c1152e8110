#!/bin/sh
# Make PostgreSQL's server binaries (initdb, pg_ctl) available: the PostgreSQL state
# tests and benchmarks start throwaway servers of their own. Idempotent; nothing is
# started or enabled as a system service.
set -eu
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
  sh "$(dirname "$0")/apt-ensure.sh" postgres /usr/lib/postgresql/15/bin/initdb postgresql-15 "the PostgreSQL state tests"
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
fi
# Debian's package starts a cluster of its own on port 5432; the tests never use it.
if command -v pg_lsclusters >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  pg_lsclusters -h 2>/dev/null | awk '$4 == "online" { print $1, $2 }' | while read -r v c; do
    pg_ctlcluster "$v" "$c" stop >/dev/null 2>&1 || true
  done
fi
[ -n "$bin" ] && [ -x "$bin/initdb" ] && echo "[postgres] $("$bin/postgres" --version)" || true
