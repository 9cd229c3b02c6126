#!/bin/bash
# CPU speed and poses of two sleap-live installs, side by side on the lab clips.
#
#   scripts/side_by_side.sh OLD_PYTHON NEW_PYTHON WORK_DIR
#
# OLD_PYTHON and NEW_PYTHON are the interpreters of two venvs, each with a checkout
# of sleap-live installed (e.g. a `git worktree` of an older commit). For each case,
# four rounds of (old, new) `sleap-live run ... --engine onnx`, each side with a
# cache of its own; the first round exports and is not printed. Then the poses each
# side wrote are compared frame by frame. Run it on a quiet machine.
set -euo pipefail
OLD=$1 NEW=$2 WORK=$3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
M=$ROOT/tests/data/lab_models
mkdir -p "$WORK"
cd "$WORK"
for scene in multi_384:400 single_1024:200 multi_1024:100; do
  name=${scene%%:*} frames=${scene##*:}
  [ -f "$name.mp4" ] || "$NEW" "$ROOT/scripts/fixtures/lab.py" --scene "$name" --frames "$frames" -o "$name.mp4"
done
declare -A MODELS=(
  [single_1024]="-m $M/single_instance_1024"
  [topdown_384]="-m $M/centroid_384 -m $M/centered_instance_384"
  [bottomup_1024]="-m $M/bottomup_1024"
)
declare -A CLIPS=([single_1024]=single_1024.mp4 [topdown_384]=multi_384.mp4 [bottomup_1024]=multi_1024.mp4)
for case in single_1024 topdown_384 bottomup_1024; do
  for round in 0 1 2 3; do
    for side in old new; do
      python=$OLD
      [ "$side" = new ] && python=$NEW
      out=$WORK/${case}_$side.slp
      rm -f "$out"
      # shellcheck disable=SC2086  # MODELS holds several -m options
      line=$(SLEAP_LIVE_CACHE_DIR=$WORK/cache_$side "$python" -m sleap_live run "${CLIPS[$case]}" \
        ${MODELS[$case]} -o "$out" -q --engine onnx 2>&1 | grep "frames in")
      [ "$round" = 0 ] || echo "$case $side $round $line"
    done
  done
done
"$NEW" - "$WORK" <<'PY'
import sys

import numpy as np
import sleap_io as sio

work = sys.argv[1]
for case in ("single_1024", "topdown_384", "bottomup_1024"):
    old = sio.load_slp(f"{work}/{case}_old.slp", open_videos=False)
    new = sio.load_slp(f"{work}/{case}_new.slp", open_videos=False)
    same = len(old) == len(new) and all(
        a.frame_idx == b.frame_idx
        and len(a.instances) == len(b.instances)
        and all(
            np.array_equal(i.numpy(scores=True), j.numpy(scores=True), equal_nan=True)
            and i.score == j.score
            for i, j in zip(a.instances, b.instances)
        )
        for a, b in zip(old, new)
    )
    print(case, len(old), "frames", "poses identical" if same else "POSES DIFFER")
PY
