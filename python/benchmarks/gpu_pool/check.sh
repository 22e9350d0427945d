#!/bin/bash
# The warm pool on a machine with an NVIDIA GPU and a CUDA build of torch:
#     python/benchmarks/gpu_pool/check.sh [ELASTIC_RUN]   (default: target/release/elastic-run)
# A worker forked by the pool initialises CUDA and forms an NCCL group; it runs direct, then through
# a cold pool, then twice through the warm one (elastic-run's wall time each); the pool is shown
# without CUDA initialised and with one thread; a preload that initialises CUDA is refused by name.
set -u
ER=$(realpath "${1:-target/release/elastic-run}")
cd "$(dirname "$0")"
PY=$(command -v python3)
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
work=$(mktemp -d); cp cuda_job.py poison.py "$work"/; cd "$work"
export GANGWAY_POOL_OWNER=$$   # this shell owns the pool: it serves all the runs below
run() { local label=$1; shift; local s=$(date +%s%N); "$ER" --gpus 1 --python "$PY" --job-id "$label" --checkpoint-dir "ck-$label" "$@" cuda_job.py 2>&1 | grep -v "^elastic-run: launch" ; echo "$label: elastic-run wall $(( ($(date +%s%N) - s) / 1000000 )) ms"; }
run direct --spawn direct
run pool-cold --spawn pool
run pool-warm --spawn pool
run pool-warm2 --spawn pool
echo "--- pool log"; cat /tmp/gangway-pool-$(id -u)/*.log 2>/dev/null | grep -v NumPy | tail -5
echo "--- zygote state"; for p in $(pgrep -f "gangway's warm worker pool" | head -3); do echo "pid $p threads $(ls /proc/$p/task | wc -l) nvidia maps: $(grep -c nvidia /proc/$p/maps)"; done
echo "--- a preload that initialises CUDA"
PYTHONPATH=$work GANGWAY_POOL_PRELOAD=poison run poisoned --spawn pool
cat /tmp/gangway-pool-$(id -u)/*.log 2>/dev/null | grep -i "cannot serve" | tail -2
