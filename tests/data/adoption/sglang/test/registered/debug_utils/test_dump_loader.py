import unittest

from sglang.test.ci.ci_register import register_cuda_ci

register_cuda_ci(est_time=10, suite="stage-a-test-cpu")


class TestDumpLoader(unittest.TestCase):
    def test_load(self):
        self.assertTrue(True)


if __name__ == "__main__":
    unittest.main()
