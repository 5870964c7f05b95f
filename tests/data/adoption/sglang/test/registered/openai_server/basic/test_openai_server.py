import unittest

from sglang.test.ci.ci_register import register_cuda_ci

register_cuda_ci(est_time=200, suite="stage-b-test-1-gpu-small")


class TestOpenAIServer(unittest.TestCase):
    def test_completion(self):
        self.assertIn("text", {"text": "hello"})

    def test_chat_completion(self):
        self.assertTrue(True)


if __name__ == "__main__":
    unittest.main()
