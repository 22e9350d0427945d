"""The few torch.distributed operations the helper needs, without importing torch eagerly.

Importing torch costs seconds, and the stop/progress/plan parts must work without it. A process
group can only be initialized by a script that already imported torch.distributed, so looking in
sys.modules answers "is distributed initialized?" without ever importing torch ourselves.
"""

import os
import sys

from . import _env


def initialized_dist():
    """The torch.distributed module if a process group is initialized, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def rank():
    """Global rank: from the process group when there is one, else torchrun's RANK (default 0)."""
    dist = initialized_dist()
    if dist is not None:
        return dist.get_rank()
    return _env.get_int("RANK", 0, 0)


def local_rank():
    return _env.get_int("LOCAL_RANK", 0, 0)


def _device_for(dist, group):
    import torch

    # NCCL only reduces CUDA tensors; gloo/mpi (and mixed "cpu:gloo,cuda:nccl" groups) take CPU ones.
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _all_reduce(values, dtype, op, group):
    """``values`` reduced element-wise with ``op`` (a ReduceOp name) over the group, and the group's
    size; the values themselves and 1 when not distributed. A collective."""
    dist = initialized_dist()
    if dist is None:
        return list(values), 1
    import torch

    t = torch.tensor(list(values), dtype=getattr(torch, dtype), device=_device_for(dist, group))
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=group)
    return t.tolist(), dist.get_world_size(group)


def all_max(values, group=None):
    """Element-wise MAX of a list of ints over the group; the list itself when not distributed.

    Every rank of the group must call this at the same point: it is a collective.
    """
    return _all_reduce(values, "int64", "MAX", group)[0]


def all_mean(value, group=None):
    """The mean of a float over the group; the value itself when not distributed (a collective)."""
    (total,), ranks = _all_reduce([float(value)], "float64", "SUM", group)
    return total / ranks


def pid_tag():
    # Temp-file suffix unique per process: several ranks (or a crashed predecessor) may use the same dir.
    return f"{os.getpid()}"
