"""Shared test helpers: import path, a clean environment, and a torch-free serializer."""

import functools
import importlib.util
import os
import pickle
import sys
import unittest
from unittest import mock

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Test the package in this checkout, not some installed copy.
sys.path.insert(0, PYTHON_DIR)

HAVE_TORCH = importlib.util.find_spec("torch") is not None


def in_ci():
    """Whether this is CI (``CI=true`` or ``CI=1``), where scripts/test has installed torch."""
    return os.environ.get("CI", "").lower() in ("true", "1")


def needs(available, why):
    """Decorator for a test case class or method that needs a component the machine may lack (torch):
    without it, the test skips with ``why``; in CI, where scripts/test installs it, a skip would hide a
    broken install, so the test fails instead. The one way the Python tests skip, as the Rust tests'
    ``support::skip``."""
    if available:
        return lambda obj: obj
    if not in_ci():
        return unittest.skip(why)
    message = f"CI=true, and this test would skip: {why}; in CI a test that cannot run fails"

    def fail(*_args, **_kwargs):
        raise AssertionError(message)

    def decorate(obj):
        if isinstance(obj, type):
            obj.setUpClass = classmethod(fail)
            return obj
        return functools.wraps(obj)(fail)

    return decorate

# Variables that would leak from a developer's shell (or a surrounding torchrun) into the tests.
_CONTRACT_PREFIXES = ("GANGWAY_",)
_TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def clean_environ(base=None):
    env = dict(os.environ if base is None else base)
    for key in list(env):
        if key.startswith(_CONTRACT_PREFIXES) or key in _TORCHRUN_VARS or key.startswith("TORCHELASTIC_"):
            del env[key]
    return env


def patched_env(**values):
    """Context manager: os.environ without contract/torchrun variables, plus ``values``."""
    env = clean_environ()
    env.update({k: str(v) for k, v in values.items()})
    return mock.patch.dict(os.environ, env, clear=True)


class PickleSerializer:
    """Stands in for torch.save/torch.load through checkpoint._serializer, so that the checkpoint
    logic (atomicity, manifest, checksums, pruning) is tested without torch installed."""

    @staticmethod
    def save(obj, f):
        pickle.dump(obj, f)

    @staticmethod
    def load(f, map_location=None, weights_only=True):
        return pickle.load(f)
