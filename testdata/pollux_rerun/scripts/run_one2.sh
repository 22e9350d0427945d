#!/bin/bash
# usage: run_one2.sh POLICY LOAD WORKLOAD(n) [SEED] [nofit]
# Runs Pollux's simulator (adaptdl osdi21-artifact @ c793c70, files unmodified) on one workload.
# SEED (default 0) seeds numpy's global RNG before simulator.py runs (only Pollux's GA is random).
# "nofit" (only valid for optimus/tiresias): replaces goodput.fit_perf_params by a function returning None
# before simulator.py imports it. Optimus/Tiresias never read the fitted model (fixed batch sizes, and
# OptimusPolicy only calls Application.get_throughput), so the output is unchanged; it removes ~75% of the
# run time (scipy/autograd fits). Checked: per-job JCTs identical to the authors' results.
set -e
P=$1; L=$2; W=$3; S=${4:-0}; F=${5:-}
case $L in 1.0) D=workloads;; *) D=workloads-$L;; esac
TAG=${P}_load${L}_workload-${W}
OUT=/work/peers/pollux-runs
PATCH=""
if [ "$F" = nofit ]; then
  [ "$P" != pollux ] || { echo "nofit is not valid for pollux"; exit 1; }
  PATCH="import goodput; goodput.fit_perf_params = lambda *a, **k: None; "
fi
cd /work/peers/adaptdl/simulator
PYTHONHASHSEED=0 /usr/bin/time -f "%e s wall %U s user" -o $OUT/$TAG.time nice -n 10 \
  /work/peers/pollux-venv/bin/python -c "import sys, runpy, numpy; sys.path.insert(0, ''); numpy.random.seed($S); ${PATCH}sys.argv = ['simulator.py'] + sys.argv[1:]; runpy.run_path('simulator.py', run_name='__main__')" \
  --policy $P --output $OUT/$TAG.log $D/workload-$W.csv > $OUT/$TAG.out 2>&1
echo "$F" > $OUT/$TAG.mode
tail -1 $OUT/$TAG.out > $OUT/$TAG.avg
gzip -f $OUT/$TAG.out
