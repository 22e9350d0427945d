"""gangway.simulate against ``gangway simulate --format json``: the same input gives the same
numbers, every one of them, and the same errors.

The command line is found at ``$GANGWAY_BIN``, else at ``target/release/gangway`` under
``$CARGO_TARGET_DIR`` or the checkout; the comparisons skip, saying so, when it is not built.
Sia's workloads are read from ``$GANGWAY_SIA_DATA`` or ``../shared/data/sia`` beside the checkout.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import tempfile
import threading
import unittest
from pathlib import Path
from typing import Any, Optional

import gangway

REPO = Path(__file__).resolve().parents[3]


def _cli() -> Optional[Path]:
    candidates = []
    if os.environ.get("GANGWAY_BIN"):
        candidates.append(Path(os.environ["GANGWAY_BIN"]))
    if os.environ.get("CARGO_TARGET_DIR"):
        candidates.append(Path(os.environ["CARGO_TARGET_DIR"]) / "release" / "gangway")
    candidates.append(REPO / "target" / "release" / "gangway")
    return next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


CLI = _cli()
NO_CLI = "the gangway binary is not built: cargo build --release, or set GANGWAY_BIN"
SIA = Path(os.environ.get("GANGWAY_SIA_DATA", REPO.parent / "shared" / "data" / "sia"))
SIA_WORKLOAD = SIA / "workloads" / "philly" / "workload-1.csv"

try:
    import pandas  # noqa: F401

    HAS_PANDAS = True
except ImportError:
    HAS_PANDAS = False


def cli_json(*args: str) -> list[dict[str, Any]]:
    """What ``gangway simulate ARGS --format json`` prints, parsed."""
    assert CLI is not None
    out = subprocess.run(
        [str(CLI), "simulate", *args, "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
    )
    parsed: list[dict[str, Any]] = json.loads(out.stdout)
    return parsed


def cli_error(*args: str) -> str:
    """What ``gangway simulate ARGS`` says on stderr when it fails."""
    assert CLI is not None
    out = subprocess.run([str(CLI), "simulate", *args], capture_output=True, text=True)
    assert out.returncode != 0, out.stdout
    return out.stderr


class Agreement(unittest.TestCase):
    """Every figure of every policy is the command line's, bit for bit (but the wall time)."""

    def assert_same(self, cli: list[dict[str, Any]], results: gangway.Results) -> None:
        self.assertEqual([s["policy"] for s in cli], [r.policy for r in results])
        for expected, run in zip(cli, results):
            got = run.summary.as_dict()
            self.assertEqual(set(expected), set(got), "the same figures")
            for key, value in expected.items():
                if key == "wall_s":
                    continue
                mine = got[key]
                if value is None and isinstance(mine, float) and math.isnan(mine):
                    continue  # JSON's null for a NaN figure (no job measured)
                self.assertEqual(value, mine, f"{run.policy}: {key}")
                self.assertIs(type(value), type(mine), f"{run.policy}: {key}")

    @unittest.skipIf(CLI is None, NO_CLI)
    def test_the_bundled_trace(self) -> None:
        policies = ["fifo", "tiresias", "max_min_fairness"]
        cli = cli_json("--policy", ",".join(policies))
        results = gangway.simulate(policies=policies)
        self.assert_same(cli, results)
        self.assertEqual(len(results["fifo"].jobs), 6000)
        self.assertTrue(any("bundled Gavel trace" in n for n in results.notes), results.notes)

    @unittest.skipIf(CLI is None, NO_CLI)
    def test_a_synthetic_trace_under_several_policies(self) -> None:
        policies = ["fifo", "las", "tiresias", "gandiva", "themis:f=0.5", "srtf"]
        trace, cluster = "synthetic:jobs=200,seed=1,rate=4", "v100=8,k80=8"
        cli = cli_json("--trace", trace, "--cluster", cluster, "--policy", ",".join(policies))
        results = gangway.simulate(trace, cluster=cluster, policies=policies)
        self.assert_same(cli, results)
        # The same cluster given as a mapping, the policies as one string.
        again = gangway.simulate(
            trace, cluster={"v100": 8, "k80": 8}, policies=",".join(policies)
        )
        self.assert_same(cli, again)

    @unittest.skipIf(CLI is None, NO_CLI)
    def test_the_options_reach_the_run_as_they_reach_the_command(self) -> None:
        trace = "synthetic:jobs=120,seed=3,rate=6"
        cli = cli_json(
            "--trace", trace, "--cluster", "v100=2x4,k80=4", "--gpus-per-node", "4",
            "--policy", "tiresias,las", "--round", "120", "--window", "20..100",
            "--seed", "7", "--preempt-cost", "30", "--restore-cost", "20",
            "--load-factor", "1.5", "--schedule-on-arrival", "--no-ftf",
        )
        results = gangway.simulate(
            trace, cluster="v100=2x4,k80=4", gpus_per_node=4, policies=["tiresias", "las"],
            round=120, window=range(20, 100), seed=7, preempt_cost=30, restore_cost=20,
            load_factor=1.5, schedule_on_arrival=True, fairness=False,
        )
        self.assert_same(cli, results)
        self.assertIsNone(results["las"].summary.avg_ftf)

    @unittest.skipIf(CLI is None, NO_CLI)
    @unittest.skipUnless(SIA_WORKLOAD.is_file(), f"Sia's workloads are not at {SIA}")
    def test_a_sia_workload_on_its_own_cluster(self) -> None:
        policies = ["fifo", "tiresias", "sia"]
        cli = cli_json("--trace", str(SIA_WORKLOAD), "--policy", ",".join(policies))
        results = gangway.simulate(SIA_WORKLOAD, policies=policies)
        self.assert_same(cli, results)
        self.assertTrue(any("Sia's heterogeneous cluster" in n for n in results.notes))
        self.assertEqual(results["sia"].gpu_types, ["aws", "rtx", "dgx-ext"])


class Traces(unittest.TestCase):
    """A trace as a path, as dicts and as a DataFrame: the same jobs, the same numbers."""

    def setUp(self) -> None:
        source = REPO / "data" / "gavel" / "continuous_single_seed0.csv"
        with open(source, newline="") as f:
            self.rows = list(csv.DictReader(f))[:150]
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / "trace.csv"
        with open(self.path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(self.rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(self.rows)
        self.options: dict[str, Any] = dict(
            cluster="v100=4,p100=4,k80=4", policies=["fifo", "tiresias"], rate=6.0
        )

    def tearDown(self) -> None:
        self.dir.cleanup()

    def numbers(self, results: gangway.Results) -> list[Any]:
        return [
            ({k: v for k, v in run.summary.as_dict().items() if k != "wall_s"}, run.jobs)
            for run in results
        ]

    def test_dicts_give_what_the_file_gives(self) -> None:
        from_file = gangway.simulate(self.path, **self.options)
        # Numbers as numbers, not text: written as Python writes them, read back the same.
        def number(text: str) -> Any:
            try:
                return int(text)
            except ValueError:
                return float(text)

        typed = [
            {k: (number(v) if k != "job_type" else v) for k, v in row.items()} for row in self.rows
        ]
        from_dicts = gangway.simulate(typed, **self.options)
        self.assertEqual(self.numbers(from_file), self.numbers(from_dicts))
        self.assertEqual(len(from_dicts["fifo"].jobs), 150)

    @unittest.skipUnless(HAS_PANDAS, "pandas is not installed")
    def test_a_dataframe_gives_what_the_file_gives(self) -> None:
        import pandas as pd

        from_file = gangway.simulate(self.path, **self.options)
        from_frame = gangway.simulate(pd.read_csv(self.path), **self.options)
        self.assertEqual(self.numbers(from_file), self.numbers(from_frame))

    @unittest.skipUnless(HAS_PANDAS, "pandas is not installed")
    def test_results_to_pandas(self) -> None:
        results = gangway.simulate(self.path, **self.options)
        summaries = results.to_pandas()
        self.assertEqual(list(summaries["policy"]), ["fifo", "tiresias"])
        self.assertEqual(summaries.loc[1, "avg_jct_h"], results["tiresias"].summary.avg_jct_h)
        jobs = results["fifo"].to_pandas()
        self.assertEqual(len(jobs), 150)
        for column in ["id", "arrival", "finish", "jct", "gpu_seconds_v100", "gpu_seconds_k80"]:
            self.assertIn(column, jobs.columns)
        first = results["fifo"].jobs[0]
        self.assertEqual(jobs.loc[0, "jct"], first.jct)
        self.assertEqual(len(results.jobs_to_pandas()), 300)

    def test_records_know_their_jct(self) -> None:
        run = gangway.simulate(self.path, **self.options)["fifo"]
        for job in run.jobs:
            assert job.finish is not None and job.first_start is not None
            self.assertEqual(job.jct, job.finish - job.arrival)
            self.assertGreaterEqual(job.first_start, job.arrival)
            self.assertEqual(len(job.gpu_seconds), len(run.gpu_types))
        self.assertEqual(run.unfinished, [])

    def test_runs_in_threads_at_once_agree(self) -> None:
        # The GIL is released while Rust runs: two calls at once, from two threads.
        answers: list[gangway.Results] = []
        threads = [
            threading.Thread(target=lambda: answers.append(gangway.simulate(self.path, **self.options)))
            for _ in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(answers), 2)
        self.assertEqual(self.numbers(answers[0]), self.numbers(answers[1]))


class Errors(unittest.TestCase):
    """Errors are the package's exceptions, with the Rust error's message: the command's."""

    def test_a_policy_that_does_not_exist(self) -> None:
        with self.assertRaises(gangway.BadPolicy) as e:
            gangway.simulate(policies=["fifoo"])
        self.assertTrue(str(e.exception).startswith("unknown policy `fifoo`"), str(e.exception))
        self.assertIsInstance(e.exception, gangway.GangwayError)

    def test_a_knob_out_of_its_range(self) -> None:
        with self.assertRaises(gangway.BadPolicy) as e:
            gangway.simulate(policies=["tiresias:promote=-1"])
        self.assertIn("knob `promote=-1`", str(e.exception))

    def test_a_policy_that_needs_what_the_run_lacks(self) -> None:
        with self.assertRaises(gangway.BadPolicy) as e:
            gangway.simulate("synthetic:jobs=10,seed=1", cluster="v100=4", policies=["sia"])
        self.assertIn("needs a goodput model", str(e.exception))

    def test_a_bad_value_in_a_row_names_the_row_line_and_field(self) -> None:
        rows = [
            {"job_id": 0, "num_gpu": 1, "submit_time": 0, "duration": 60},
            {"job_id": 1, "num_gpu": "two", "submit_time": 10, "duration": 60},
        ]
        with self.assertRaises(gangway.BadInput) as e:
            gangway.simulate(rows, cluster="v100=4", policies=["fifo"])
        err = e.exception
        self.assertTrue(str(err).startswith("records:3: field `num_gpu`"), str(err))
        self.assertEqual((err.source, err.line, err.field, err.record), ("records", 3, "num_gpu", 1))

    def test_a_bad_value_in_a_file_names_the_file_line_and_field(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "t.csv"
            path.write_text("job_id,num_gpu,submit_time,duration\n0,1,0,60\n1,1,5,-3\n")
            with self.assertRaises(gangway.BadInput) as e:
                gangway.simulate(path, cluster="v100=4", policies=["fifo"])
            self.assertEqual(e.exception.source, str(path))
            self.assertEqual(e.exception.line, 3)
            self.assertEqual(e.exception.field, "duration")
            self.assertIsNone(e.exception.record)
            if CLI is not None:
                self.assertIn(f"error: {e.exception}", cli_error("--trace", str(path), "--cluster", "v100=4", "--policy", "fifo"))

    def test_options_out_of_range_and_a_bad_cluster(self) -> None:
        cases: list[tuple[dict[str, Any], list[str], str]] = [
            ({"rate": -1.0}, ["--rate", "-1"], "--rate"),
            ({"cluster": "v100=abc"}, ["--cluster", "v100=abc"], "--cluster v100=abc"),
            ({"round": 0.0}, ["--round", "0"], "--round"),
            ({"window": "9..3"}, ["--window", "9..3"], "window `9..3` is empty"),
        ]
        for kwargs, args, said in cases:
            with self.subTest(args=args):
                with self.assertRaises(gangway.BadInput) as e:
                    gangway.simulate(policies=["fifo"], **kwargs)
                self.assertIn(said, str(e.exception))
                self.assertIsNone(e.exception.line)
                if CLI is not None and not args[0] == "--window":
                    # (clap itself refuses a bad --window, in its own words.)
                    self.assertIn(f"error: {e.exception}", cli_error("--policy", "fifo", *args))

    def test_a_missing_file_and_a_trace_of_no_known_kind(self) -> None:
        with self.assertRaises(gangway.BadInput) as e:
            gangway.simulate("/nonexistent/trace.csv", policies=["fifo"])
        self.assertIn("/nonexistent/trace.csv", str(e.exception))
        with self.assertRaises(gangway.BadInput):
            gangway.simulate(42, policies=["fifo"])  # type: ignore[arg-type]


class Listing(unittest.TestCase):
    def test_the_builtin_policies_are_listed(self) -> None:
        names = dict(gangway.builtin_policies())
        for name in gangway.DEFAULT_POLICIES.split(","):
            self.assertIn(name, names)


if __name__ == "__main__":
    unittest.main()
