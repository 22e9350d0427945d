"""The stubs type a user's script: ``mypy --strict`` passes on tests/typed/compare.py and catches
a call that does not fit them. Skips when mypy is not installed."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import gangway

TYPED = Path(__file__).resolve().parent / "typed"
HAS_MYPY = importlib.util.find_spec("mypy") is not None
# No cache: it would be written beside the script checked, into the sources.
MYPY = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull]


def mypy(path: Path) -> subprocess.CompletedProcess[str]:
    # Run beside the script, not beside the package's sources: the installed package is checked.
    return subprocess.run(
        [*MYPY, str(path)],
        cwd=path.parent,
        capture_output=True,
        text=True,
    )


@unittest.skipUnless(HAS_MYPY, "mypy is not installed")
class Stubs(unittest.TestCase):
    def test_a_typed_script_passes_mypy_strict(self) -> None:
        out = mypy(TYPED / "compare.py")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_a_call_against_the_stubs_is_caught(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            bad = Path(d) / "bad.py"
            bad.write_text(
                "import gangway\n"
                "r = gangway.simulate(policies=3)\n"
                "x: str = r['fifo'].summary.avg_jct_h\n"
            )
            out = mypy(bad)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn('Argument "policies" to "simulate"', out.stdout)
        self.assertIn('"float", variable has type "str"', out.stdout)

    def test_the_stubs_pass_mypy_strict(self) -> None:
        # The installed package, found as a user's script finds it.
        with tempfile.TemporaryDirectory() as d:
            out = subprocess.run(
                [*MYPY, "-p", "gangway"],
                cwd=d,
                capture_output=True,
                text=True,
            )
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_the_stubs_name_everything_the_package_exports(self) -> None:
        stub = Path(gangway.__file__).with_suffix(".pyi").read_text()
        for name in gangway.__all__:
            self.assertIn(name, stub)


class Example(unittest.TestCase):
    def test_the_typed_script_runs(self) -> None:
        out = subprocess.run(
            [sys.executable, str(TYPED / "compare.py")], capture_output=True, text=True, cwd=TYPED
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("'fifo'", out.stdout)
        self.assertIn("(0, 'num_gpu')", out.stdout)


if __name__ == "__main__":
    unittest.main()
