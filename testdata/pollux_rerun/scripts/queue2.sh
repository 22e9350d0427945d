#!/bin/bash
cd /work/peers/pollux-runs
while kill -0 $1 2>/dev/null; do sleep 20; done
for L in 0.5 1.0 1.5 2.0; do for W in 1 2 3 4; do
  TAG=optimus_load${L}_workload-${W}
  [ -f $TAG.avg ] && continue
  ./run_one2.sh optimus $L $W 0 nofit
done; done
echo done > queue2.done
