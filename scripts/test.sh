#!/bin/sh
# Run every test of the repository on this machine, from nothing:
# pnpm and dependencies, a Docker engine (when one can be had), the bottle base
# image, a build, then typecheck, lint, all tests and the package checks. Ends with one line:
# "tests: N passed, N failed, N skipped".
# BB_REQUIRE_DOCKER=1 makes a missing Docker engine an error instead of a skip.
set -eu
cd "$(dirname "$0")/.."
export TURBO_TELEMETRY_DISABLED=1 COREPACK_ENABLE_DOWNLOAD_PROMPT=0
sh scripts/bootstrap.sh
sh scripts/ensure-docker.sh
sh scripts/build-base-image.sh
sh scripts/build-agents-image.sh
sh scripts/ensure-chromium.sh
sh scripts/ensure-tmux.sh
sh scripts/ensure-postgres.sh
rm -rf test-artifacts/vitest
pnpm turbo run build --output-logs=errors-only
status=0
pnpm turbo run typecheck lint test --concurrency=1 --continue --output-logs=new-only || status=$?
# Each published package packs, and its tarball passes publint --strict and attw.
pnpm turbo run publint --concurrency=1 --output-logs=errors-only || status=1
# Every package with a test script must have left a report.
pkgs=$(node -e "
  const fs=require('fs');
  for (const d of ['packages','apps']) for (const p of fs.readdirSync(d)) {
    try { const j=JSON.parse(fs.readFileSync(d+'/'+p+'/package.json')); if (j.scripts&&j.scripts.test) console.log(p); } catch {}
  }
  console.log('e2e');")
node scripts/test-summary.mjs $pkgs || status=1
exit $status
