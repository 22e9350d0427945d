"""Atomic, checksummed checkpoints listed in a manifest: ``save`` and ``load``.

Directory layout (GANGWAY_CHECKPOINT_DIR)::

    ckpt-000000000200.pt     one file per saved step (12 digits so names sort by step)
    ckpt-000000000300.pt
    manifest.json            {"format": "gangway-manifest/1", "job_id": ..., "checkpoints": [
                                {"step": 300, "file": "ckpt-000000000300.pt", "size": 1234,
                                 "sha256": "...", "time": 1700000000.0}, ...]}   (oldest first)

The manifest is the source of truth: a checkpoint file counts only once the manifest lists it, and
the manifest is replaced atomically after the file is durable. So a crash at any point leaves
either the previous manifest (the new file is an ignored orphan) or the new one, never a manifest
that points at a partial file.
"""

import glob
import hashlib
import json
import os
import re
import time
import warnings

from . import _dist, _env, _fs

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "gangway-manifest/1"
CHECKPOINT_FORMAT = "gangway-checkpoint/1"
_NAME_RE = re.compile(r"^ckpt-(\d{12})\.pt$")

# Test seam: an object with save(obj, fileobj) and load(fileobj, map_location=, weights_only=).
# None means torch.save / torch.load, which is what the library always uses in real jobs.
_serializer = None


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written, found, verified or read."""


class ChecksumMismatch(CheckpointError):
    """A checkpoint file's size or sha256 differs from what the manifest recorded."""


class _TorchSerializer:
    @staticmethod
    def save(obj, f):
        import torch

        torch.save(obj, f)

    @staticmethod
    def load(f, map_location=None, weights_only=True):
        import torch

        return torch.load(f, map_location=map_location, weights_only=weights_only)


def _get_serializer():
    if _serializer is not None:
        return _serializer
    try:
        import torch  # noqa: F401
    except ImportError:
        raise CheckpointError("gangway_worker checkpoints need torch (pip install torch)") from None
    return _TorchSerializer


def checkpoint_name(step):
    return f"ckpt-{step:012d}.pt"


def _sha256_file(path):
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def read_manifest(directory):
    """The manifest's entries, oldest first; [] when there is no manifest.

    Raises CheckpointError when it is malformed. Entries are validated strictly, in particular the
    file name, because ``save`` deletes files named by the manifest: a hand-edited "../x" must
    never make it delete something outside the checkpoint directory.
    """
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, "rb") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: unreadable manifest: {e}") from e
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise CheckpointError(f"{path}: not a {MANIFEST_FORMAT} manifest")
    entries = doc.get("checkpoints")
    if not isinstance(entries, list):
        raise CheckpointError(f"{path}: not a {MANIFEST_FORMAT} manifest")
    for e in entries:
        ok = (
            isinstance(e, dict)
            and isinstance(e.get("step"), int)
            and isinstance(e.get("size"), int)
            and isinstance(e.get("sha256"), str)
            and isinstance(e.get("file"), str)
            and e["file"] == checkpoint_name(e["step"])
        )
        if not ok:
            raise CheckpointError(f"{path}: malformed entry {e!r}")
    return sorted(entries, key=lambda e: e["step"])


def _write_manifest(directory, entries):
    doc = {"format": MANIFEST_FORMAT, "job_id": _env.get_str(_env.JOB_ID), "checkpoints": entries}
    data = (json.dumps(doc, indent=1) + "\n").encode()
    _fs.write_atomic(os.path.join(directory, MANIFEST), lambda f: f.write(data))


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _save_on_rank0(state, step, directory, keep):
    serializer = _get_serializer()
    os.makedirs(directory, exist_ok=True)
    # Read the manifest first: if it is malformed we fail before writing anything.
    entries = read_manifest(directory)

    path = os.path.join(directory, checkpoint_name(step))
    # The step travels inside the file too, so a file is self-describing even without a manifest.
    payload = {"format": CHECKPOINT_FORMAT, "step": step, "state": state}
    _fs.write_atomic(path, lambda f: serializer.save(payload, f))
    size, digest = _sha256_file(path)
    new = {"step": step, "file": checkpoint_name(step), "size": size, "sha256": digest, "time": time.time()}

    # Saving step s starts the history over from s: entries at or after s belong to a timeline that
    # was abandoned (e.g. we resumed from an older checkpoint because the newest was corrupt). Dropping
    # them keeps "newest in the manifest" == "most recently saved", which is what load() resumes from.
    history = [e for e in entries if e["step"] < step] + [new]
    kept, dropped = history[-keep:], history[:-keep]
    abandoned = [e for e in entries if e["step"] > step]
    _write_manifest(directory, kept)

    # Only delete once the manifest no longer lists them: a crash before this point leaves orphans
    # (wasted space), never a manifest entry without its file.
    for e in dropped + abandoned:
        _unlink_quietly(os.path.join(directory, e["file"]))
    # Temp files left by an earlier incarnation killed mid-write (SIGKILL skips write_atomic's
    # cleanup). Ours are all renamed or removed by now, and only rank 0 of this job writes here.
    for pattern in (".ckpt-*.pt.tmp-*", f".{MANIFEST}.tmp-*"):
        for stale in glob.glob(os.path.join(glob.escape(directory), pattern)):
            _unlink_quietly(stale)
    return path


def _newest_is(directory, step):
    """Whether the manifest's newest checkpoint is ``step``'s, with a file of the recorded size."""
    try:
        entries = read_manifest(directory)
    except CheckpointError:
        return False
    if not entries or entries[-1]["step"] != step:
        return False
    try:
        return os.path.getsize(os.path.join(directory, entries[-1]["file"])) == entries[-1]["size"]
    except OSError:
        return False


def save(state, step, *, directory=None, keep=None, group=None):
    """Save ``state`` as the checkpoint for ``step`` (the number of completed optimizer steps).

    Only global rank 0 writes: temp file, flush + fsync, rename to ckpt-<step:012d>.pt, fsync the
    directory, then replace manifest.json atomically and delete all but the newest ``keep``
    (GANGWAY_KEEP_CHECKPOINTS, default 3). ``state`` is anything torch.save accepts.

    When torch.distributed is initialized, every rank of ``group`` must call this at the same step:
    no rank returns before the checkpoint is durable, and if rank 0 failed, every rank raises
    CheckpointError instead of training on without a checkpoint. Returns the checkpoint's path.

    ``state`` may be a callable that makes the state (every rank calls it, so it may gather from
    all of them). Then a step the manifest already lists as its newest, with its file intact in
    size, is not saved again and the callable is not called: a stop just after a periodic save
    costs one collective, not a second save. A state given as an object always replaces the step's
    checkpoint.
    """
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointError(f"step must be a non-negative int, got {step!r}")
    directory = directory or _env.get_str(_env.CHECKPOINT_DIR)
    if directory is None:
        raise CheckpointError(f"{_env.CHECKPOINT_DIR} is not set and no directory was given")
    if keep is None:
        keep = _env.get_int(_env.KEEP_CHECKPOINTS, _env.DEFAULT_KEEP_CHECKPOINTS, 1)
    if keep < 1:
        raise CheckpointError(f"keep must be >= 1, got {keep}")

    if callable(state):
        saved = 1 if _dist.rank() == 0 and _newest_is(directory, step) else 0
        # Rank 0's answer, for every rank: the others all add 0.
        if _dist.all_max([saved], group)[0]:
            return os.path.join(directory, checkpoint_name(step))
        state = state()
    error = None
    if _dist.rank() == 0:
        try:
            _save_on_rank0(state, step, directory, keep)
        except Exception as e:  # reported to the other ranks below, then re-raised
            error = e
    # This all-reduce is also the barrier the other ranks wait on.
    failed = _dist.all_max([1 if error else 0], group)[0]
    if error is not None:
        raise error
    if failed:
        raise CheckpointError(f"rank 0 failed to save the checkpoint for step {step} (see rank 0's log)")
    return os.path.join(directory, checkpoint_name(step))


def _load_entry(directory, entry, verify, map_location, weights_only):
    path = os.path.join(directory, entry["file"])
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: no such checkpoint file")
    if verify:
        if "sha256" not in entry:
            raise CheckpointError(
                f"{path} is not listed in {os.path.join(directory, MANIFEST)}, so its checksum "
                f"cannot be verified (pass verify=False to load it anyway)"
            )
        size, digest = _sha256_file(path)
        if size != entry["size"] or digest != entry["sha256"]:
            raise ChecksumMismatch(
                f"{path}: checksum mismatch: file has {size} bytes, sha256 {digest}; "
                f"the manifest recorded {entry['size']} bytes, sha256 {entry['sha256']}"
            )
    try:
        with open(path, "rb") as f:
            payload = _get_serializer().load(f, map_location=map_location, weights_only=weights_only)
    except CheckpointError:
        raise
    except Exception as e:
        raise CheckpointError(f"{path}: cannot be read: {e}") from e
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: not a {CHECKPOINT_FORMAT} file")
    if entry.get("step") is not None and payload.get("step") != entry["step"]:
        raise CheckpointError(f"{path}: holds step {payload.get('step')}, expected {entry['step']}")
    return payload["state"], payload["step"]


def _find_and_load(path, fallback, verify, map_location, weights_only):
    source = "path"
    if path is None:
        path, source = _env.get_str(_env.RESUME_FROM), _env.RESUME_FROM
    if path is None:
        # Nothing named explicitly: resume from the newest checkpoint of our own directory, if any.
        directory = _env.get_str(_env.CHECKPOINT_DIR)
        entries = read_manifest(directory) if directory else []
        if not entries:
            return None
        first, earlier = entries[-1], entries[:-1]
    else:
        directory, name = os.path.split(os.path.abspath(path))
        entries = read_manifest(directory)
        first = next((e for e in entries if e["file"] == name), None)
        if first is None:
            if not os.path.exists(path):
                # A launcher that asks to resume from a missing file has lost state; starting from
                # scratch silently would throw away the job's progress, so fail loudly.
                raise CheckpointError(f"{source}={path}: no such checkpoint file")
            match = _NAME_RE.match(name)
            first = {"file": name, "step": int(match.group(1)) if match else None}
        earlier = [e for e in entries if first["step"] is not None and e["step"] < first["step"]]

    candidates = [first] + (list(reversed(earlier)) if fallback else [])
    failures = []
    for entry in candidates:
        try:
            return _load_entry(directory, entry, verify, map_location, weights_only)
        except CheckpointError as e:
            if not fallback:
                raise
            warnings.warn(f"gangway_worker: skipping bad checkpoint: {e}", RuntimeWarning, stacklevel=3)
            failures.append(str(e))
    raise CheckpointError("no loadable checkpoint; tried, newest first: " + " | ".join(failures))


def load(path=None, *, fallback=False, verify=True, map_location="cpu", weights_only=True, group=None):
    """Load a checkpoint; returns ``(state, step)``, or None when there is nothing to resume.

    Which one: ``path`` if given, else GANGWAY_RESUME_FROM if set, else the newest checkpoint in
    GANGWAY_CHECKPOINT_DIR's manifest. None means: no path given, no GANGWAY_RESUME_FROM, and no
    (or an empty) manifest. A named file that does not exist is an error, not None.

    verify: check size and sha256 against the manifest; ChecksumMismatch on a difference.
    fallback: on any failure (mismatch, missing or unreadable file) warn and try the previous
      checkpoints listed in the manifest, newest first; CheckpointError if none loads.
    map_location: passed to torch.load; "cpu" by default so that all ranks do not pile onto GPU 0.
    weights_only: passed to torch.load. True (torch's safe default) loads tensors, state dicts and
      plain Python containers/numbers/strings; pass False for arbitrary pickled objects.

    When torch.distributed is initialized this is a collective: ranks compare the step they loaded
    and all raise CheckpointError if they differ (e.g. one rank fell back and another did not).
    """
    result = _find_and_load(path, fallback, verify, map_location, weights_only)
    step = -1 if result is None else result[1]
    high, neg_low = _dist.all_max([step, -step], group)
    if high != -neg_low:
        raise CheckpointError(
            f"ranks loaded different checkpoints (steps {-neg_low} to {high}; -1 means none); "
            f"is {_env.CHECKPOINT_DIR} on storage every rank sees?"
        )
    return result
