"""A FIFO written in Python against gangway's `fifo` (Rust) and LAS (`max_min_fairness`) on the
bundled 6,000-job Gavel trace: wall seconds of each run (the engine's `wall_s`), best of three.

    python python/gangway_py/benchmarks/python_policy.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import gangway

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import test_policy  # noqa: E402  (registers `test_py_fifo`)

assert test_policy.Fifo


def best_wall(spec: str) -> tuple[float, float]:
    runs = [gangway.simulate(policies=[spec], fairness=False)[spec].summary for _ in range(3)]
    return min(s.wall_s for s in runs), runs[0].avg_jct_h


if __name__ == "__main__":
    rust, jct = best_wall("fifo")
    print(f"fifo (Rust)             {rust:7.3f} s  avg JCT {jct:.4f} h")
    python, jct = best_wall("test_py_fifo")
    print(f"fifo (Python)           {python:7.3f} s  avg JCT {jct:.4f} h  ({python / rust:.1f}x)")
    las, jct = best_wall("max_min_fairness")
    print(f"max_min_fairness (Rust) {las:7.3f} s  avg JCT {jct:.4f} h")
