"""Names of the environment variables in the launcher contract, and small parsing helpers.

Every parse error names the variable, so that a misconfigured launcher is diagnosed from the
worker's traceback alone.
"""

import os

JOB_ID = "GANGWAY_JOB_ID"
CHECKPOINT_DIR = "GANGWAY_CHECKPOINT_DIR"
RESUME_FROM = "GANGWAY_RESUME_FROM"
PLAN = "GANGWAY_PLAN"
GLOBAL_BATCH = "GANGWAY_GLOBAL_BATCH"
MICRO_BATCH = "GANGWAY_MICRO_BATCH"
ACCUM_STEPS = "GANGWAY_ACCUM_STEPS"
STOP_FILE = "GANGWAY_STOP_FILE"
PROGRESS_FILE = "GANGWAY_PROGRESS_FILE"
KEEP_CHECKPOINTS = "GANGWAY_KEEP_CHECKPOINTS"
RETUNE_FILE = "GANGWAY_RETUNE_FILE"

DEFAULT_KEEP_CHECKPOINTS = 3


class PlanError(ValueError):
    """A contract variable is malformed or inconsistent with the others.

    This is a configuration error: retrying cannot fix it. Scripts should exit with
    EXIT_USAGE (2) on it, e.g. ``parser.error(str(err))``.
    """


def get_str(name, env=None):
    """The variable's value, or None when it is unset or empty.

    Empty counts as unset because launchers and shells commonly export ``VAR=`` to mean "none".
    """
    env = os.environ if env is None else env
    value = env.get(name, "")
    return value if value.strip() else None


def get_int(name, default=None, minimum=None, env=None):
    """Parse an integer variable; None/default when unset; PlanError naming it when malformed."""
    raw = get_str(name, env)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise PlanError(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise PlanError(f"{name}={raw!r} must be >= {minimum}")
    return value
