"""Atomic file replacement.

Readers (the launcher, a resuming job) must only ever see a complete old file or a complete new
one, never a partial write. Hence: write a temp file in the same directory (rename is only atomic
within one filesystem), then os.replace it over the target.
"""

import os

from ._dist import pid_tag


def fsync_dir(path):
    """Make a rename in ``path`` durable: the new directory entry lives in the directory's data."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path(final_path):
    head, tail = os.path.split(final_path)
    # Leading dot keeps temp files out of globs such as ckpt-*.pt.
    return os.path.join(head, f".{tail}.tmp-{pid_tag()}")


def write_atomic(final_path, write, durable=True):
    """Create/replace ``final_path`` with what ``write(fileobj)`` writes, atomically.

    durable=True also fsyncs the data and the directory, so the file survives a power loss or a
    node crash once this returns (needed for checkpoints; skipped for the per-step progress file,
    where only atomicity towards other processes matters and an fsync per step would be costly).
    """
    tmp = temp_path(final_path)
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, final_path)
    except BaseException:
        # Never leave a half-written temp file behind, whatever interrupted us.
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if durable:
        fsync_dir(os.path.dirname(final_path) or ".")
