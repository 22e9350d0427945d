#!/bin/bash
# usage: run_one.sh POLICY LOAD WORKLOAD(n) [SEED]
# Runs Pollux's simulator (adaptdl osdi21-artifact @ c793c70, unmodified) on one workload.
# SEED (default 0) seeds numpy's global RNG before simulator.py runs (only Pollux's GA is random).
set -e
P=$1; L=$2; W=$3; S=${4:-0}
case $L in 1.0) D=workloads;; *) D=workloads-$L;; esac
TAG=${P}_load${L}_workload-${W}
OUT=/work/peers/pollux-runs
cd /work/peers/adaptdl/simulator
PYTHONHASHSEED=0 /usr/bin/time -f "%e s wall %U s user" -o $OUT/$TAG.time nice -n 10 \
  /work/peers/pollux-venv/bin/python -c "import sys, runpy, numpy; numpy.random.seed($S); sys.argv = ['simulator.py'] + sys.argv[1:]; runpy.run_path('simulator.py', run_name='__main__')" \
  --policy $P --output $OUT/$TAG.log $D/workload-$W.csv > $OUT/$TAG.out 2>&1
tail -1 $OUT/$TAG.out > $OUT/$TAG.avg
gzip -f $OUT/$TAG.out
