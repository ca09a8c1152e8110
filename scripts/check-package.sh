#!/bin/sh
# Check a package as it will be published: pack it with pnpm (which applies
# publishConfig and resolves catalog:/workspace: versions), then run publint and
# attw --profile esm-only on the tarball. Run from the package directory.
set -eu
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pnpm pack --pack-destination "$out" >/dev/null
tgz=$(ls "$out"/*.tgz)
if tar -xOzf "$tgz" package/package.json | grep -qE '"(catalog|workspace):'; then
  echo "packed package.json still has catalog:/workspace: specifiers" >&2
  exit 1
fi
publint run "$tgz" --strict
attw "$tgz" --profile esm-only --format table-flipped
