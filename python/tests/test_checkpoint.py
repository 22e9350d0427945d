import hashlib
import json
import os
import shutil
import tempfile
import unittest

import support

from gangway_worker import ChecksumMismatch, CheckpointError, checkpoint, load, read_manifest, save


def corrupt(path):
    """Flip one byte in the middle: same size, different checksum."""
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


class CheckpointTestBase(unittest.TestCase):
    serializer = support.PickleSerializer

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = os.path.join(tmp.name, "ckpt")
        self.env = {"GANGWAY_CHECKPOINT_DIR": self.dir, "GANGWAY_JOB_ID": "job-1"}
        saved = checkpoint._serializer
        self.addCleanup(setattr, checkpoint, "_serializer", saved)
        checkpoint._serializer = self.serializer
        env = support.patched_env(**self.env)
        env.start()
        self.addCleanup(env.stop)

    def ckpt(self, step):
        return os.path.join(self.dir, f"ckpt-{step:012d}.pt")

    def steps_on_disk(self):
        return sorted(int(n[5:17]) for n in os.listdir(self.dir) if n.startswith("ckpt-"))

    def manifest_steps(self):
        return [e["step"] for e in read_manifest(self.dir)]


class SaveTest(CheckpointTestBase):
    def test_save_writes_file_and_manifest(self):
        path = save({"w": [1.0, 2.0], "epoch": 3}, 5)
        self.assertEqual(path, self.ckpt(5))
        with open(path, "rb") as f:
            data = f.read()
        with open(os.path.join(self.dir, "manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual(manifest["job_id"], "job-1")
        [entry] = manifest["checkpoints"]
        self.assertEqual((entry["step"], entry["file"]), (5, "ckpt-000000000005.pt"))
        self.assertEqual(entry["size"], len(data))
        self.assertEqual(entry["sha256"], hashlib.sha256(data).hexdigest())
        # Nothing else: no temp files left behind.
        self.assertEqual(sorted(os.listdir(self.dir)), ["ckpt-000000000005.pt", "manifest.json"])

    def test_keep_last_n_from_env(self):
        with support.patched_env(GANGWAY_KEEP_CHECKPOINTS=2, **self.env):
            for step in range(1, 6):
                save({"step": step}, step)
        self.assertEqual(self.steps_on_disk(), [4, 5])
        self.assertEqual(self.manifest_steps(), [4, 5])

    def test_keep_default_is_three_and_argument_overrides(self):
        for step in range(1, 6):
            save({}, step)
        self.assertEqual(self.manifest_steps(), [3, 4, 5])
        save({}, 6, keep=1)
        self.assertEqual(self.steps_on_disk(), [6])
        self.assertEqual(self.manifest_steps(), [6])

    def test_saving_an_earlier_step_drops_the_abandoned_future(self):
        for step in (10, 20, 30):
            save({"s": step}, step)
        save({"s": 15}, 15)
        self.assertEqual(self.manifest_steps(), [10, 15])
        self.assertEqual(self.steps_on_disk(), [10, 15])
        self.assertEqual(load()[1], 15)

    def test_resaving_the_same_step_replaces_it(self):
        save({"v": 1}, 7)
        save({"v": 2}, 7)
        self.assertEqual(self.manifest_steps(), [7])
        self.assertEqual(load(), ({"v": 2}, 7))

    def test_a_lazy_state_already_saved_at_its_step_is_not_made_or_saved_again(self):
        made = []

        def make(value):
            def state():
                made.append(value)
                return {"v": value}
            return state

        save(make(1), 7)
        self.assertEqual(made, [1])
        before = os.stat(self.ckpt(7))
        with open(os.path.join(self.dir, "manifest.json"), "rb") as f:
            manifest = f.read()
        self.assertEqual(save(make(2), 7), self.ckpt(7))
        self.assertEqual(made, [1], "the state was not made again")
        after = os.stat(self.ckpt(7))
        self.assertEqual((before.st_ino, before.st_mtime_ns), (after.st_ino, after.st_mtime_ns))
        with open(os.path.join(self.dir, "manifest.json"), "rb") as f:
            self.assertEqual(f.read(), manifest)
        self.assertEqual(load(), ({"v": 1}, 7))
        # A new step is saved; a damaged file at the newest step is saved again.
        save(make(3), 8)
        self.assertEqual((made, load()), ([1, 3], ({"v": 3}, 8)))
        with open(self.ckpt(8), "ab") as f:
            f.write(b"torn")
        save(make(4), 8)
        self.assertEqual((made, load()), ([1, 3, 4], ({"v": 4}, 8)))

    def test_failed_serialization_leaves_previous_state_untouched(self):
        save({"ok": True}, 1)
        with open(os.path.join(self.dir, "manifest.json"), "rb") as f:
            before = f.read()

        class Boom(Exception):
            pass

        class Failing:
            @staticmethod
            def save(obj, f):
                f.write(b"partial")
                raise Boom()

        checkpoint._serializer = Failing
        with self.assertRaises(Boom):
            save({"ok": False}, 2)
        checkpoint._serializer = self.serializer
        self.assertEqual(sorted(os.listdir(self.dir)), ["ckpt-000000000001.pt", "manifest.json"])
        with open(os.path.join(self.dir, "manifest.json"), "rb") as f:
            self.assertEqual(f.read(), before)
        self.assertEqual(load(), ({"ok": True}, 1))

    def test_stale_temp_files_are_cleaned_up(self):
        os.makedirs(self.dir)
        stale = [os.path.join(self.dir, n) for n in (".ckpt-000000000003.pt.tmp-99999", ".manifest.json.tmp-99999")]
        for p in stale:
            open(p, "w").close()
        save({}, 4)
        self.assertEqual(sorted(os.listdir(self.dir)), ["ckpt-000000000004.pt", "manifest.json"])

    def test_only_rank_zero_writes(self):
        with support.patched_env(RANK=1, **self.env):
            self.assertEqual(save({"x": 1}, 3), self.ckpt(3))
        self.assertFalse(os.path.exists(self.dir))

    def test_requires_a_directory(self):
        with support.patched_env():
            with self.assertRaisesRegex(CheckpointError, "GANGWAY_CHECKPOINT_DIR"):
                save({}, 1)

    def test_rejects_bad_steps(self):
        for bad in (-1, 1.5, "3", True):
            with self.subTest(step=bad), self.assertRaises(CheckpointError):
                save({}, bad)

    def test_malformed_manifest_is_an_error_not_silently_replaced(self):
        os.makedirs(self.dir)
        with open(os.path.join(self.dir, "manifest.json"), "w") as f:
            f.write("{not json")
        with self.assertRaisesRegex(CheckpointError, "manifest"):
            save({}, 1)
        with self.assertRaisesRegex(CheckpointError, "manifest"):
            load()

    def test_manifest_cannot_point_outside_the_directory(self):
        # save() deletes files the manifest names, so a hostile entry must be refused.
        os.makedirs(self.dir)
        victim = os.path.join(os.path.dirname(self.dir), "victim")
        open(victim, "w").close()
        doc = {"format": "gangway-manifest/1", "checkpoints": [
            {"step": 1, "file": "../victim", "size": 0, "sha256": "0" * 64}]}
        with open(os.path.join(self.dir, "manifest.json"), "w") as f:
            json.dump(doc, f)
        with self.assertRaisesRegex(CheckpointError, "malformed entry"):
            save({}, 2, keep=1)
        self.assertTrue(os.path.exists(victim))


class LoadTest(CheckpointTestBase):
    def test_nothing_to_resume(self):
        self.assertIsNone(load())  # directory does not even exist yet
        os.makedirs(self.dir)
        self.assertIsNone(load())  # exists, no manifest
        with support.patched_env():
            self.assertIsNone(load())  # no directory configured at all

    def test_loads_newest(self):
        for step in (1, 2, 3):
            save({"s": step}, step)
        self.assertEqual(load(), ({"s": 3}, 3))

    def test_resume_from_env_wins_over_newest(self):
        for step in (1, 2, 3):
            save({"s": step}, step)
        with support.patched_env(GANGWAY_RESUME_FROM=self.ckpt(2), **self.env):
            self.assertEqual(load(), ({"s": 2}, 2))
        self.assertEqual(load(self.ckpt(1)), ({"s": 1}, 1))

    def test_missing_resume_from_is_an_error_naming_the_variable(self):
        save({}, 1)
        with support.patched_env(GANGWAY_RESUME_FROM=self.ckpt(99), **self.env):
            with self.assertRaisesRegex(CheckpointError, "GANGWAY_RESUME_FROM"):
                load()

    def test_checksum_mismatch_raises(self):
        save({"s": 1}, 1)
        save({"s": 2}, 2)
        corrupt(self.ckpt(2))
        with self.assertRaises(ChecksumMismatch) as ctx:
            load()
        self.assertIn("ckpt-000000000002.pt", str(ctx.exception))
        self.assertIn("checksum mismatch", str(ctx.exception))

    def test_truncation_is_detected_too(self):
        save({"s": 1, "pad": "x" * 1000}, 1)
        with open(self.ckpt(1), "r+b") as f:
            f.truncate(100)
        with self.assertRaises(ChecksumMismatch):
            load()

    def test_fallback_to_previous_good_checkpoint(self):
        for step in (1, 2, 3):
            save({"s": step}, step)
        corrupt(self.ckpt(3))
        with self.assertWarnsRegex(RuntimeWarning, "ckpt-000000000003.pt"):
            self.assertEqual(load(fallback=True), ({"s": 2}, 2))

    def test_fallback_skips_missing_files(self):
        for step in (1, 2):
            save({"s": step}, step)
        os.unlink(self.ckpt(2))
        with self.assertRaisesRegex(CheckpointError, "no such checkpoint file"):
            load()
        with self.assertWarns(RuntimeWarning):
            self.assertEqual(load(fallback=True), ({"s": 1}, 1))

    def test_fallback_from_resume_from_goes_to_older_not_newer(self):
        for step in (1, 2, 3):
            save({"s": step}, step)
        corrupt(self.ckpt(2))
        with support.patched_env(GANGWAY_RESUME_FROM=self.ckpt(2), **self.env):
            with self.assertWarns(RuntimeWarning):
                self.assertEqual(load(fallback=True), ({"s": 1}, 1))

    def test_fallback_with_nothing_good_raises(self):
        for step in (1, 2):
            save({"s": step}, step)
        corrupt(self.ckpt(1))
        corrupt(self.ckpt(2))
        with self.assertWarns(RuntimeWarning):
            with self.assertRaisesRegex(CheckpointError, "no loadable checkpoint"):
                load(fallback=True)

    def test_unlisted_file_needs_verify_false(self):
        save({"s": 4}, 4)
        elsewhere = os.path.join(os.path.dirname(self.dir), "copy")
        os.makedirs(elsewhere)
        copy = shutil.copy(self.ckpt(4), elsewhere)
        with self.assertRaisesRegex(CheckpointError, "not listed"):
            load(copy)
        self.assertEqual(load(copy, verify=False), ({"s": 4}, 4))

    def test_unreadable_content_is_a_checkpoint_error(self):
        save({"s": 1}, 1)
        with open(self.ckpt(1), "wb") as f:
            f.write(b"garbage")
        with self.assertRaisesRegex(CheckpointError, "cannot be read"):
            load(verify=False)


@unittest.skipIf(support.HAVE_TORCH, "torch is installed: the default serializer is torch")
class WithoutTorchTest(unittest.TestCase):
    def test_default_serializer_needs_torch(self):
        self.assertIsNone(checkpoint._serializer)  # the library default: torch.save/torch.load
        with tempfile.TemporaryDirectory() as d, support.patched_env(GANGWAY_CHECKPOINT_DIR=d):
            with self.assertRaisesRegex(CheckpointError, "need torch"):
                save({}, 1)


@support.needs(support.HAVE_TORCH, "torch is not installed")
class TorchCheckpointTest(CheckpointTestBase):
    serializer = None  # the real default: torch.save / torch.load

    def test_round_trip_tensors_and_state_dicts(self):
        import torch

        model = torch.nn.Linear(3, 2)
        opt = torch.optim.Adam(model.parameters())
        model(torch.randn(4, 3)).sum().backward()
        opt.step()
        state = {"model": model.state_dict(), "optim": opt.state_dict(), "rng": torch.get_rng_state(), "n": 7}
        save(state, 12)
        loaded, step = load()
        self.assertEqual(step, 12)
        self.assertEqual(loaded["n"], 7)
        self.assertTrue(torch.equal(loaded["rng"], state["rng"]))
        for k, v in model.state_dict().items():
            self.assertTrue(torch.equal(loaded["model"][k], v))
        # The file is a plain torch.save archive, readable without gangway_worker.
        raw = torch.load(self.ckpt(12), weights_only=True)
        self.assertEqual((raw["format"], raw["step"]), ("gangway-checkpoint/1", 12))

    def test_checksum_mismatch_with_torch(self):
        import torch

        save({"t": torch.arange(1000)}, 1)
        corrupt(self.ckpt(1))
        with self.assertRaises(ChecksumMismatch):
            load()


if __name__ == "__main__":
    unittest.main()
