#!/bin/sh
# forklift's harness. The host writes the agent's runner into /harness-state each run
# (run.sh: the bridge to the proxies, then the agent's CLI; the prompt; the agent's
# files) and starts the container with `sh /harness-state/run.sh <the CLI's argv>`;
# with no command, the runner is started as it is.
set -eu
[ "$#" -gt 0 ] && exec "$@"
exec sh /harness-state/run.sh
