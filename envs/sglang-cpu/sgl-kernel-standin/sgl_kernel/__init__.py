"""An import-only stand-in for `sgl_kernel`, SGLang's kernel package, in pytest-rocm's SGLang CPU
environment.

Why it exists: SGLang's modules import its CPU kernel ops at start-up (`copy_all_layer_kv_cache_cpu`
in `kernels/ops/kvcache/cache_move.py`, the token-pool ops in `srt/mem_cache/allocation.py`, the
speculative decoding ops), but the kernel packages on PyPI are CUDA-only builds (no `*_cpu` ops, no
source distribution); the CPU build exists only as source in SGLang's repository. On CPUs without
AMX, such as this project's CI machine, SGLang serves through its plain-torch paths and never calls
these ops: they only need to be importable.

What it guarantees: every op here raises `StandInOpCalled`, naming itself, if anything calls it, so
a code path that needs a real kernel fails loudly and never computes wrong numbers. A name that is
not listed here is an `AttributeError` (so `from sgl_kernel import x` is an ImportError naming `x`
and this file): when a new SGLang imports another op, the server does not start, and pytest-rocm
says which name to add. GPU runners install the real `sgl-kernel`; this package is never installed
there.
"""

# The names SGLang 0.5.23 imports from sgl_kernel when it starts on the CPU (measured: a recording
# stand-in logged exactly these during a server start and plain completions, chat and
# speculative-decoding imports).
OPS = (
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_req_to_token_pool_cpu",
    "build_tree_kernel_efficient_cpu",
    "copy_all_layer_kv_cache_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "verify_tree_greedy_cpu",
)

__version__ = "0.5.23+cpu.standin"


class StandInOpCalled(NotImplementedError):
    """A code path called an op that only the real CPU build of sgl_kernel provides."""


def _stand_in(name: str):
    def op(*args, **kwargs):
        raise StandInOpCalled(
            f"sgl_kernel.{name} was called, but this environment has pytest-rocm's import-only stand-in for "
            f"sgl_kernel ({__file__}): the CPU kernel op {name} is not built here. Serve without the feature that "
            "needs it, or run on a runner with the real sgl-kernel.")

    op.__name__ = op.__qualname__ = name
    return op


for _name in OPS:
    globals()[_name] = _stand_in(_name)
del _name
