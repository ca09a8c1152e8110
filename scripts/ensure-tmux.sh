#!/bin/sh
# Make tmux available for the supervise inbox's terminal test (a real terminal, keys
# sent, the screen read back). Idempotent.
set -eu
sh "$(dirname "$0")/apt-ensure.sh" tmux tmux tmux "the inbox test"
command -v tmux >/dev/null 2>&1 && echo "[tmux] $(tmux -V)" || true
