"""gangway_worker: the training-script side of gangway's launcher contract.

gangway's launcher (``elastic-run``, which wraps ``torchrun``) may stop a job at any time to
preempt, migrate or resize it, and later restart it elsewhere, possibly at another world size.
This package lets a training script cooperate with that: read the plan, notice stop requests,
report liveness, and save/resume checkpoints safely. It needs only the standard library; torch is
imported lazily, and only for checkpoints and for agreement between ranks.

Environment set by the launcher (plus torchrun's RANK, LOCAL_RANK, WORLD_SIZE, ...)
--------------------------------------------------------------------------------
GANGWAY_JOB_ID            opaque job identifier (recorded in the manifest and the progress file)
GANGWAY_CHECKPOINT_DIR    directory for checkpoints and manifest.json; must be visible to every
                          rank that calls load() (shared storage for multi-node jobs)
GANGWAY_RESUME_FROM       checkpoint file to resume from; unset/empty: newest in the manifest
GANGWAY_PLAN              parallelism, e.g. "dp=2,tp=1,pp=1" (absent keys mean 1); dp*tp*pp must
                          equal WORLD_SIZE. Unset: dp=WORLD_SIZE, tp=pp=1.
GANGWAY_GLOBAL_BATCH      samples per optimizer step, constant across resizes
GANGWAY_MICRO_BATCH       samples per forward/backward pass on one rank
GANGWAY_ACCUM_STEPS       micro-batches accumulated per optimizer step;
                          global = micro * accum * dp (a missing one is derived from the others)
GANGWAY_STOP_FILE         the launcher creates this file to request a cooperative stop
GANGWAY_PROGRESS_FILE     the helper writes {"step", "time", ...} JSON here (local rank 0 only)
GANGWAY_KEEP_CHECKPOINTS  how many checkpoints to keep (default 3)
GANGWAY_RETUNE_FILE       "GLOBAL MICRO ACCUM": the batch the scheduler chose since launch, for a
                          job that adapts its batch (read by retuned())
GANGWAY_CPUS              cores this job's processes on this machine are pinned to (all local ranks)
GANGWAY_CPU_LIST          which cores, e.g. "0,1,5"
GANGWAY_MEMORY_GB         GB of memory allotted to the job on this machine (a cgroup limit where the
                          daemon can enforce one)
An empty value counts as unset.

API
---
plan()                      -> Plan (dp, tp, pp, batches, job_id, checkpoint_dir, resume_from, ...);
                               PlanError naming the variable on bad values
retuned(plan)               -> Plan at the scheduler's new batch, or None (a collective)
should_stop(group=None)     -> bool; stop file exists or SIGTERM received, agreed by all ranks
exit_now(code=0)            flush stdout, stderr and logging, then os._exit: a stop's last step,
                               once saved and the process group destroyed (skips torch's ~1 s unload)
report_progress(step)       -> atomically rewrite the progress file (local rank 0 only)
GoodputMeter(ddp_model)     step time (compute, sync), batch and gradient noise scale, for
                               report_progress(goodput=meter.summary()) (see goodput)
save(state, step)           -> atomic checkpoint by rank 0 + manifest with sha256; keeps last N
load(path=None, fallback=False) -> (state, step) or None when there is nothing to resume
resources()                 -> Resources (cpus, cpu_list, memory_gb) this job was allotted
dataloader_workers()        -> DataLoader workers per local rank from the allotted cores
intra_op_threads()          -> torch.set_num_threads() per local rank from the allotted cores
allreduce_in_rank_order     DDP comm hook for bit-exact resumption at any world size (see reproducible)

A training loop::

    import gangway_worker as gw
    gw.install_sigterm_handler()          # as early as possible
    p = gw.plan(global_batch=256, micro_batch=8)
    step = 0
    resumed = gw.load(fallback=True)
    if resumed: state, step = resumed; ...restore model/optimizer/RNG/data position...
    while step < total:
        if gw.should_stop():             # every rank, every step: it is a collective
            gw.save(make_state(), step)
            sys.exit(gw.EXIT_PREEMPTED_OK)
        train_one_step(step); step += 1
        gw.report_progress(step)
        if step % save_every == 0: gw.save(make_state(), step)

Exit codes
----------
EXIT_OK (0)            the job finished.
EXIT_PREEMPTED_OK (0)  the job stopped cooperatively after saving a checkpoint. Also 0: the
                       launcher knows it asked for the stop, and the manifest says where to resume.
EXIT_FAILURE (1)       crash / uncaught exception (Python's default); the launcher may retry.
EXIT_USAGE (2)         bad arguments or configuration (argparse's default, and what scripts should
                       use for PlanError); the launcher must never retry it.
Note that torchrun itself exits 1 whenever any worker exits non-zero, so the launcher has to
read the worker exit codes from torchrun's failure report to tell 2 from 1.
"""

from ._env import PlanError
from .checkpoint import ChecksumMismatch, CheckpointError, load, read_manifest, save
from .control import exit_now, install_sigterm_handler, report_progress, should_stop
from .goodput import GoodputMeter
from .plan import Plan, plan, retuned
from .reproducible import allreduce_in_rank_order
from .resources import Resources, dataloader_workers, intra_op_threads, resources

EXIT_OK = 0
EXIT_PREEMPTED_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

__all__ = [
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_PREEMPTED_OK",
    "EXIT_USAGE",
    "ChecksumMismatch",
    "CheckpointError",
    "GoodputMeter",
    "Plan",
    "PlanError",
    "Resources",
    "allreduce_in_rank_order",
    "dataloader_workers",
    "exit_now",
    "intra_op_threads",
    "install_sigterm_handler",
    "load",
    "plan",
    "read_manifest",
    "report_progress",
    "resources",
    "retuned",
    "save",
    "should_stop",
]
