#!/bin/sh
# Make sure the pinned pnpm is on PATH and the workspace's dependencies are installed.
# Idempotent: a second run only checks. Works as root on a fresh Node 20 machine.
set -eu
cd "$(dirname "$0")/.."
want=$(node -p "require('./package.json').packageManager.split('@')[1].split('+')[0]")
export COREPACK_ENABLE_DOWNLOAD_PROMPT=0

have=$(pnpm --version 2>/dev/null || true)
if [ "$have" != "$want" ]; then
  echo "[bootstrap] installing pnpm $want"
  if command -v corepack >/dev/null 2>&1 && corepack enable >/dev/null 2>&1 && corepack install >/dev/null 2>&1; then
    :
  else
    npm install -g "pnpm@$want" >/dev/null 2>&1
  fi
  have=$(pnpm --version 2>/dev/null || true)
  if [ "$have" != "$want" ]; then
    echo "[bootstrap] could not get pnpm $want (have: ${have:-none}); install it with: npm install -g pnpm@$want" >&2
    exit 1
  fi
fi

# A frozen lockfile in CI; locally too, so the lockfile stays the source of truth.
if [ ! -f node_modules/.modules.yaml ] || [ pnpm-lock.yaml -nt node_modules/.modules.yaml ]; then
  echo "[bootstrap] pnpm install"
  pnpm install --frozen-lockfile --reporter=append-only | grep -vE '^(Progress|Packages:)' || {
    echo "[bootstrap] pnpm install failed" >&2
    exit 1
  }
fi
