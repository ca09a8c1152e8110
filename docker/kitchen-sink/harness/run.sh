#!/bin/sh
# forklift's harness: the host writes the agent's runner into /harness-state each run
# (its run.sh, the prompt, the agent's files); this image only starts it.
set -eu
exec sh /harness-state/run.sh "$@"
