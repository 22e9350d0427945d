#!/bin/bash
cd /work/peers/pollux-runs
for P in tiresias optimus; do for L in 1.0 0.5 1.5 2.0; do for W in 1 2 3 4; do
  TAG=${P}_load${L}_workload-${W}
  [ -f $TAG.avg ] && continue
  ./run_one.sh $P $L $W
done; done; done
echo done > queue_baselines.done
