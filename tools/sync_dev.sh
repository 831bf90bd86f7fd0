#!/usr/bin/env bash
# Copy this worktree into the lead checkout's ignored .dev/ (what the device tool sends), with the
# Nsight env beside it as .dev/shared-device.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
dst=${1:-/work/main/.dev}
rm -rf "$dst"; mkdir -p "$dst"
(cd "$src" && tar cf - --exclude=.git --exclude=.venv --exclude=runs --exclude=__pycache__ .) | (cd "$dst" && tar xf -)
cp -r /work/shared/device "$dst/shared-device"; chmod -R u+w "$dst/shared-device"
