"""Gates on numbers: per-platform baselines, accuracy and performance checks against them, and
golden outputs (token ids and logprobs) compared with vLLM's rule."""

__all__ = ["baselines", "checks", "golden"]
