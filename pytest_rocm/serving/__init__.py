"""Inference servers for the suites: the server process (vLLM or SGLang, its health wait and
process-group teardown), the pool that shares servers between tests, the plan of which servers the
run's tests will ask for, the thread that starts them ahead of need, the tiny models built at test
time, and the provider that the server fixtures call."""

__all__ = ["process", "pool", "plan", "ahead", "tiny_models", "provider"]
