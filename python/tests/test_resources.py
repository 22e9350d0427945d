import os
import unittest

import support  # noqa: F401  (puts the package on sys.path)

from gangway_worker import PlanError, Resources, dataloader_workers, intra_op_threads, resources


class ResourcesTest(unittest.TestCase):
    def test_the_launchers_allotment(self):
        env = {"GANGWAY_CPUS": "6", "GANGWAY_CPU_LIST": "2,3,4,5,6,7", "GANGWAY_MEMORY_GB": "125.5"}
        self.assertEqual(resources(env), Resources(cpus=6, cpu_list=(2, 3, 4, 5, 6, 7), memory_gb=125.5))

    def test_cores_are_shared_among_local_ranks(self):
        env = {"GANGWAY_CPUS": "6", "LOCAL_WORLD_SIZE": "2"}
        self.assertEqual((dataloader_workers(env), intra_op_threads(env)), (2, 3))
        # Fewer cores than ranks: no loader processes, one thread each.
        env = {"GANGWAY_CPUS": "1", "LOCAL_WORLD_SIZE": "4"}
        self.assertEqual((dataloader_workers(env), intra_op_threads(env)), (0, 1))

    def test_without_the_launcher_the_affinity_stands_in(self):
        r = resources({})
        self.assertEqual(r.cpus, len(os.sched_getaffinity(0)))
        self.assertIsNone(r.memory_gb)
        self.assertEqual(resources({"GANGWAY_CPU_LIST": "0,1,2"}).cpus, 3)

    def test_bad_values_name_the_variable(self):
        for env, name in (
            ({"GANGWAY_CPUS": "two"}, "GANGWAY_CPUS"),
            ({"GANGWAY_CPUS": "0"}, "GANGWAY_CPUS"),
            ({"GANGWAY_CPU_LIST": "0,x"}, "GANGWAY_CPU_LIST"),
            ({"GANGWAY_MEMORY_GB": "-3"}, "GANGWAY_MEMORY_GB"),
            ({"GANGWAY_MEMORY_GB": "lots"}, "GANGWAY_MEMORY_GB"),
        ):
            with self.assertRaises(PlanError) as ctx:
                resources(env)
            self.assertIn(name, str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
