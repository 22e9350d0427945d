"""The CPUs and memory the scheduler allotted this job, and what a training script makes of them.

Under ``gangway serve`` each job is sized beside its GPUs (Synergy's mechanisms, or its server's
GPU-proportional share): its processes are pinned to ``GANGWAY_CPUS`` cores (listed in
``GANGWAY_CPU_LIST``) and held to ``GANGWAY_MEMORY_GB`` where the daemon can enforce it. A script
sizes its DataLoader and its intra-op threads from them, so that a job given more CPUs feeds its
GPUs faster, and one given fewer does not thrash. Without the variables (a bare torchrun), the
cores this process may run on stand in.
"""

import os
from typing import NamedTuple, Optional, Tuple

from ._env import PlanError, get_int, get_str

CPUS = "GANGWAY_CPUS"
CPU_LIST = "GANGWAY_CPU_LIST"
MEMORY_GB = "GANGWAY_MEMORY_GB"


class Resources(NamedTuple):
    cpus: int
    """Cores this job's processes on this machine share (all its local ranks together)."""
    cpu_list: Optional[Tuple[int, ...]]
    """Which cores, when the launcher pinned them."""
    memory_gb: Optional[float]
    """GB of memory allotted to the job on this machine, when the launcher said."""


def _affinity():
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return None


def resources(env=None):
    """The job's allotment from the environment; PlanError naming the variable on bad values."""
    env = os.environ if env is None else env
    cpu_list = None
    raw = get_str(CPU_LIST, env)
    if raw is not None:
        try:
            cpu_list = tuple(int(c) for c in raw.split(","))
        except ValueError:
            raise PlanError(f"{CPU_LIST}={raw!r} is not a comma-separated list of core numbers") from None
    cpus = get_int(CPUS, minimum=1, env=env)
    if cpus is None:
        cpus = len(cpu_list or _affinity() or ()) or (os.cpu_count() or 1)
    memory_gb = None
    raw = get_str(MEMORY_GB, env)
    if raw is not None:
        try:
            memory_gb = float(raw)
        except ValueError:
            raise PlanError(f"{MEMORY_GB}={raw!r} is not a number of GB") from None
        if not memory_gb > 0:
            raise PlanError(f"{MEMORY_GB}={raw!r} must be > 0")
    return Resources(cpus=cpus, cpu_list=cpu_list, memory_gb=memory_gb)


def _local_ranks(env):
    return get_int("LOCAL_WORLD_SIZE", default=1, minimum=1, env=env)


def dataloader_workers(env=None):
    """DataLoader worker processes for each local rank: the job's cores shared among its local
    ranks, less the one each rank's own process uses (0: load in the training process)."""
    env = os.environ if env is None else env
    return max(0, resources(env).cpus // _local_ranks(env) - 1)


def intra_op_threads(env=None):
    """Threads for each local rank's own compute (``torch.set_num_threads``): its part of the cores."""
    env = os.environ if env is None else env
    return max(1, resources(env).cpus // _local_ranks(env))
