"""Shared test helpers: import path, a clean environment, and a torch-free serializer."""

import importlib.util
import os
import pickle
import sys
from unittest import mock

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Test the package in this checkout, not some installed copy.
sys.path.insert(0, PYTHON_DIR)

HAVE_TORCH = importlib.util.find_spec("torch") is not None

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
