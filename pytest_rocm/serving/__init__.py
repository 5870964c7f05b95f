"""Inference servers for the suites: the server process (vLLM or SGLang, its health wait and
process-group teardown), the pool that shares servers between tests and starts the next one ahead of
need, the plan of which module asks for which server, the tiny models built at test time, and the
provider that the server fixtures call."""

__all__ = ["process", "pool", "plan", "tiny_models", "provider"]
