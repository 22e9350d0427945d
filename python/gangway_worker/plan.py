"""``plan()``: the parallelism and batch plan the launcher chose, parsed from the environment."""

import dataclasses
import os
from typing import Optional

from . import _dist, _env
from ._env import PlanError


@dataclasses.dataclass(frozen=True)
class Plan:
    dp: int
    tp: int
    pp: int
    global_batch: int
    micro_batch: int
    accum_steps: int
    job_id: Optional[str]
    checkpoint_dir: Optional[str]
    resume_from: Optional[str]
    keep_checkpoints: int
    rank: int
    local_rank: int
    world_size: int


def _parse_plan_string(raw):
    """``"dp=2,tp=1,pp=1"`` -> {"dp": 2, "tp": 1, "pp": 1}; absent keys mean 1."""
    sizes = {"dp": None, "tp": None, "pp": None}
    for part in raw.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in sizes:
            raise PlanError(
                f"{_env.PLAN}={raw!r}: expected comma-separated dp=N,tp=N,pp=N, got {part.strip()!r}"
            )
        if sizes[key] is not None:
            raise PlanError(f"{_env.PLAN}={raw!r}: {key} given twice")
        try:
            sizes[key] = int(value.strip())
        except ValueError:
            raise PlanError(f"{_env.PLAN}={raw!r}: {key}={value.strip()!r} is not an integer") from None
        if sizes[key] < 1:
            raise PlanError(f"{_env.PLAN}={raw!r}: {key} must be >= 1")
    return {k: (1 if v is None else v) for k, v in sizes.items()}


def _resolve_batches(dp, global_batch, micro_batch, accum_steps):
    """Fill in whichever of the three is missing so that global = micro * accum * dp.

    The invariant is what keeps the optimisation identical across world sizes: when the launcher
    shrinks dp, accumulation grows and each optimizer step still sees the same global batch.
    """
    names = f"{_env.GLOBAL_BATCH}/{_env.MICRO_BATCH}/{_env.ACCUM_STEPS}"
    if global_batch is None:
        if micro_batch is None or accum_steps is None:
            raise PlanError(
                f"{_env.GLOBAL_BATCH} is not set (set it, or both {_env.MICRO_BATCH} and {_env.ACCUM_STEPS})"
            )
        global_batch = micro_batch * accum_steps * dp
    if micro_batch is None:
        per_rank = (accum_steps or 1) * dp
        if global_batch % per_rank:
            raise PlanError(
                f"{_env.GLOBAL_BATCH}={global_batch} is not divisible by "
                f"{_env.ACCUM_STEPS}={accum_steps or 1} x dp={dp}"
            )
        micro_batch, accum_steps = global_batch // per_rank, accum_steps or 1
    if accum_steps is None:
        if global_batch % (micro_batch * dp):
            raise PlanError(
                f"{_env.GLOBAL_BATCH}={global_batch} is not divisible by "
                f"{_env.MICRO_BATCH}={micro_batch} x dp={dp}"
            )
        accum_steps = global_batch // (micro_batch * dp)
    if global_batch != micro_batch * accum_steps * dp:
        raise PlanError(
            f"{names}: {global_batch} != {micro_batch} x {accum_steps} x dp={dp} "
            f"(global batch must equal micro batch x accumulation steps x dp)"
        )
    return global_batch, micro_batch, accum_steps


def plan(env=None, *, global_batch=None, micro_batch=None):
    """Parse the launcher's plan from the environment (``env`` defaults to ``os.environ``).

    ``global_batch`` / ``micro_batch`` are the script's own defaults, used only when the launcher
    set none of GANGWAY_GLOBAL_BATCH, GANGWAY_MICRO_BATCH, GANGWAY_ACCUM_STEPS (so a script also runs
    under a bare ``torchrun``). If the launcher sets any of them, the defaults are ignored entirely,
    so that a default can never silently contradict the launcher.

    Raises PlanError, naming the variable, on malformed or inconsistent values.
    """
    env = os.environ if env is None else env
    world_size = _env.get_int("WORLD_SIZE", 1, 1, env)
    rank = _env.get_int("RANK", 0, 0, env)
    local_rank = _env.get_int("LOCAL_RANK", 0, 0, env)

    raw_plan = _env.get_str(_env.PLAN, env)
    if raw_plan is None:
        # Without a plan every worker is a data-parallel replica, which is what torchrun alone means.
        sizes = {"dp": world_size, "tp": 1, "pp": 1}
    else:
        sizes = _parse_plan_string(raw_plan)
        product = sizes["dp"] * sizes["tp"] * sizes["pp"]
        if _env.get_str("WORLD_SIZE", env) is not None and product != world_size:
            raise PlanError(
                f"{_env.PLAN}={raw_plan!r} needs dp x tp x pp = {product} workers "
                f"but WORLD_SIZE={world_size}"
            )

    batch_vars = [_env.get_int(n, None, 1, env) for n in (_env.GLOBAL_BATCH, _env.MICRO_BATCH, _env.ACCUM_STEPS)]
    if all(v is None for v in batch_vars):
        batch_vars = [global_batch, micro_batch, None]
    g, m, a = _resolve_batches(sizes["dp"], *batch_vars)

    return Plan(
        dp=sizes["dp"],
        tp=sizes["tp"],
        pp=sizes["pp"],
        global_batch=g,
        micro_batch=m,
        accum_steps=a,
        job_id=_env.get_str(_env.JOB_ID, env),
        checkpoint_dir=_env.get_str(_env.CHECKPOINT_DIR, env),
        resume_from=_env.get_str(_env.RESUME_FROM, env),
        keep_checkpoints=_env.get_int(_env.KEEP_CHECKPOINTS, _env.DEFAULT_KEEP_CHECKPOINTS, 1, env),
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
    )


def _read_retune(path):
    """``[global, micro, accum, bad]`` from the launcher's retune file: zeros while there is none;
    ``bad`` 1 when it cannot be read or does not hold three positive integers."""
    try:
        with open(path) as f:
            values = [int(v) for v in f.read().split()]
    except FileNotFoundError:
        return [0, 0, 0, 0]
    except (OSError, ValueError):
        return [0, 0, 0, 1]
    if len(values) != 3 or min(values) < 1:
        return [0, 0, 0, 1]
    return values + [0]


def retuned(current):
    """The plan at the global batch the scheduler chose since ``current``, or None when unchanged.

    A job that adapts its batch (``elastic-run --global-batch MIN:MAX`` under a daemon whose policy
    retunes it in place, as Pollux does) finds the new batch, already split by the launcher over
    this run's replicas, in ``GANGWAY_RETUNE_FILE``. Rank 0's reading stands for every rank (one
    all-reduce of four integers over the whole job), so all ranks switch at the same step: like
    ``should_stop()``, it is a collective, called by every rank at the same steps. A file rank 0
    cannot read raises PlanError on every rank. Without the variable, None at once.
    """
    path = _env.get_str(_env.RETUNE_FILE)
    if path is None:
        return None
    mine = _read_retune(path) if _dist.rank() == 0 else [0, 0, 0, 0]
    g, m, a, bad = _dist.all_max(mine)
    if bad:
        raise PlanError(f"{_env.RETUNE_FILE}={path!r} does not hold GLOBAL MICRO ACCUM on rank 0")
    if g < 1 or (g, m, a) == (current.global_batch, current.micro_batch, current.accum_steps):
        return None
    if g != m * a * current.dp:
        raise PlanError(f"{_env.RETUNE_FILE}: {g} != {m} x {a} x dp={current.dp}")
    return dataclasses.replace(current, global_batch=g, micro_batch=m, accum_steps=a)
