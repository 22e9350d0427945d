import os
import unittest
from unittest import mock

import support  # noqa: F401  (puts the package on sys.path)

from gangway_worker import Plan, PlanError, plan, retuned


class PlanTest(unittest.TestCase):
    def assertPlanError(self, env, *names, **defaults):
        with self.assertRaises(PlanError) as ctx:
            plan(env, **defaults)
        for name in names:
            self.assertIn(name, str(ctx.exception))

    def test_full_environment(self):
        p = plan({
            "WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1",
            "GANGWAY_PLAN": "dp=2, tp=2,pp=1", "GANGWAY_GLOBAL_BATCH": "64",
            "GANGWAY_MICRO_BATCH": "8", "GANGWAY_ACCUM_STEPS": "4",
            "GANGWAY_JOB_ID": "job-7", "GANGWAY_CHECKPOINT_DIR": "/ck",
            "GANGWAY_RESUME_FROM": "/ck/ckpt-000000000010.pt", "GANGWAY_KEEP_CHECKPOINTS": "5",
        })
        self.assertEqual(p, Plan(dp=2, tp=2, pp=1, global_batch=64, micro_batch=8, accum_steps=4,
                                 job_id="job-7", checkpoint_dir="/ck", resume_from="/ck/ckpt-000000000010.pt",
                                 keep_checkpoints=5, rank=3, local_rank=1, world_size=4))

    def test_defaults_without_launcher(self):
        # Bare torchrun: every worker is a DP replica; script defaults give the batch.
        p = plan({"WORLD_SIZE": "2"}, global_batch=16, micro_batch=4)
        self.assertEqual((p.dp, p.tp, p.pp), (2, 1, 1))
        self.assertEqual((p.global_batch, p.micro_batch, p.accum_steps), (16, 4, 2))
        self.assertEqual(p.keep_checkpoints, 3)
        self.assertIsNone(p.resume_from)
        self.assertIsNone(p.checkpoint_dir)

    def test_global_batch_kept_across_world_sizes(self):
        for world, accum in ((1, 8), (2, 4), (4, 2), (8, 1)):
            p = plan({"WORLD_SIZE": str(world), "GANGWAY_GLOBAL_BATCH": "32", "GANGWAY_MICRO_BATCH": "4"})
            self.assertEqual((p.dp, p.accum_steps, p.global_batch), (world, accum, 32))

    def test_micro_batch_derived(self):
        p = plan({"GANGWAY_PLAN": "dp=2", "GANGWAY_GLOBAL_BATCH": "32", "GANGWAY_ACCUM_STEPS": "4"})
        self.assertEqual(p.micro_batch, 4)
        p = plan({"GANGWAY_PLAN": "dp=2", "GANGWAY_GLOBAL_BATCH": "32"})
        self.assertEqual((p.micro_batch, p.accum_steps), (16, 1))

    def test_global_batch_derived(self):
        p = plan({"GANGWAY_PLAN": "dp=3", "GANGWAY_MICRO_BATCH": "2", "GANGWAY_ACCUM_STEPS": "5"})
        self.assertEqual(p.global_batch, 30)

    def test_script_defaults_ignored_when_launcher_sets_a_batch(self):
        p = plan({"WORLD_SIZE": "2", "GANGWAY_GLOBAL_BATCH": "64"}, global_batch=16, micro_batch=4)
        self.assertEqual((p.global_batch, p.micro_batch, p.accum_steps), (64, 32, 1))

    def test_empty_values_count_as_unset(self):
        p = plan({"GANGWAY_RESUME_FROM": "", "GANGWAY_PLAN": " ", "GANGWAY_KEEP_CHECKPOINTS": ""}, global_batch=4)
        self.assertIsNone(p.resume_from)
        self.assertEqual((p.dp, p.keep_checkpoints), (1, 3))

    def test_bad_plan_strings(self):
        for bad in ("dp=two", "dp=2,xp=1", "dp=0", "dp=2,dp=2", "dp2", "dp=2,,tp=1"):
            with self.subTest(bad=bad):
                self.assertPlanError({"GANGWAY_PLAN": bad}, "GANGWAY_PLAN", global_batch=8)

    def test_plan_must_match_world_size(self):
        self.assertPlanError({"GANGWAY_PLAN": "dp=2,tp=2", "WORLD_SIZE": "2"}, "GANGWAY_PLAN", "WORLD_SIZE",
                             global_batch=8)

    def test_bad_integers_name_the_variable(self):
        for name, value in (("GANGWAY_GLOBAL_BATCH", "abc"), ("GANGWAY_MICRO_BATCH", "0"),
                            ("GANGWAY_ACCUM_STEPS", "-1"), ("GANGWAY_KEEP_CHECKPOINTS", "0"),
                            ("WORLD_SIZE", "x"), ("RANK", "-2")):
            with self.subTest(name=name):
                env = {"GANGWAY_GLOBAL_BATCH": "8"}
                env[name] = value
                self.assertPlanError(env, name)

    def test_batch_not_divisible(self):
        self.assertPlanError({"GANGWAY_PLAN": "dp=2", "GANGWAY_GLOBAL_BATCH": "10", "GANGWAY_MICRO_BATCH": "4"},
                             "GANGWAY_GLOBAL_BATCH", "GANGWAY_MICRO_BATCH")

    def test_inconsistent_batches(self):
        self.assertPlanError({"GANGWAY_GLOBAL_BATCH": "16", "GANGWAY_MICRO_BATCH": "4", "GANGWAY_ACCUM_STEPS": "2"},
                             "GANGWAY_GLOBAL_BATCH", "GANGWAY_MICRO_BATCH", "GANGWAY_ACCUM_STEPS")

    def test_missing_global_batch(self):
        self.assertPlanError({"GANGWAY_MICRO_BATCH": "4"}, "GANGWAY_GLOBAL_BATCH")
        self.assertPlanError({}, "GANGWAY_GLOBAL_BATCH")

    def test_plan_error_is_a_value_error(self):
        self.assertTrue(issubclass(PlanError, ValueError))


class RetunedTest(unittest.TestCase):
    """retuned() without torch.distributed: rank 0's file is the answer."""

    def setUp(self):
        import tempfile
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "retune")
        self.current = plan({"WORLD_SIZE": "2", "GANGWAY_GLOBAL_BATCH": "32", "GANGWAY_MICRO_BATCH": "8"})

    def tearDown(self):
        self.dir.cleanup()

    def retuned(self, content, **env):
        if content is not None:
            with open(self.path, "w") as f:
                f.write(content)
        with mock.patch.dict(os.environ, {"GANGWAY_RETUNE_FILE": self.path, **env}):
            return retuned(self.current)

    def test_a_new_batch_is_taken_and_the_same_one_is_not(self):
        self.assertIsNone(self.retuned(None), "no file yet")
        self.assertIsNone(self.retuned("32 8 2\n"), "the batch it runs at")
        p = self.retuned("96 16 3\n")
        self.assertEqual((p.global_batch, p.micro_batch, p.accum_steps, p.dp), (96, 16, 3, 2))

    def test_without_the_variable_nothing_is_read(self):
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertIsNone(retuned(self.current))

    def test_only_rank_0_reads_the_file(self):
        # Without a process group, another rank has nothing to agree with: it waits for rank 0.
        self.assertIsNone(self.retuned("96 16 3\n", RANK="1"))

    def test_a_file_that_does_not_check_out_names_the_variable(self):
        for bad in ("96 16", "96 16 x", "0 1 1", "96 16 2"):
            with self.assertRaises(PlanError) as ctx:
                self.retuned(bad)
            self.assertIn("GANGWAY_RETUNE_FILE", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
