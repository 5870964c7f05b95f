import unittest

from sglang.test.ci.ci_register import register_amd_ci, register_cuda_ci

register_cuda_ci(est_time=300, suite="stage-b-test-1-gpu-large")
register_amd_ci(est_time=300, suite="stage-b-test-1-gpu-large-amd", disabled="see https://github.com/sgl-project/sglang/issues/1")


class TestEagleInfer(unittest.TestCase):
    def test_acceptance_length(self):
        self.assertGreater(2.5, 2.0)


if __name__ == "__main__":
    unittest.main()
