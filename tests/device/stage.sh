#!/usr/bin/env bash
# A device call sends the working tree, at most 64 MiB, and golden/ alone is larger. This packs
# golden/ into .device-golden/golden.tar.xz (git-ignored, ~16 MB; run.sh unpacks it there) and moves
# golden/ out of the checkout for the duration of the call; `stage.sh --restore` puts it back.
#   tests/device/prebuild.sh && tests/device/stage.sh
#   run(command="tests/device/run.sh", carry=[".device-bin", ".device-golden"])
#   tests/device/stage.sh --restore
set -euo pipefail
cd "$(dirname "$0")/../.."
aside="$(dirname "$PWD")/.$(basename "$PWD")-golden-aside"
if [ "${1:-}" = --restore ]; then
  [ -d "$aside" ] || { echo "nothing to restore ($aside absent)"; exit 0; }
  [ -e golden ] && { echo "golden/ exists; $aside left in place"; exit 1; }
  mv "$aside" golden && echo "golden/ restored"
  exit 0
fi
[ -d golden ] || { echo "golden/ absent (staged already? run --restore first)"; exit 1; }
[ -e "$aside" ] && { echo "$aside exists; restore or remove it first"; exit 1; }
mkdir -p .device-golden
tar -cf - golden | xz -6 -T"$(nproc)" > .device-golden/golden.tar.xz
git log -1 --format='commit %H %s' > .device-golden/commit
mv golden "$aside"
du -sh .device-golden .device-bin 2>/dev/null
echo "golden/ moved to $aside; restore with tests/device/stage.sh --restore"
