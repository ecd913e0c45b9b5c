"""The fused CPU kernel of relative attention (computed in float32), built from ``relative_cpu.cpp`` on first use.

:mod:`multimodal.layers.positions.relative`'s skewed kernel runs each query block as a dozen
PyTorch calls over every head at once, so a block's logits go through memory between calls. The C++
kernel runs the same algorithm one (batch item, head, query tile) at a time, walking the keys in tiles
of 512 with flash attention's online softmax — band product, skew, masks, softmax and value product,
and in the backward the seven products of the recomputing gradient — so each tile's logits stay in
the core's cache. Products go to the BLAS PyTorch links (sequential inside a tile; tiles run in
parallel over PyTorch's threads). 16-bit inputs are computed in float32 (docs/attention.md).

It is compiled by :func:`torch.utils.cpp_extension.load` (a C++ compiler with OpenMP, and the
``ninja`` dependency): about 20 seconds, once, announced on stderr; the build is cached under
``~/.cache/torch_extensions``, one per vector instruction set, torch version and checkout. Where it cannot be
built (no compiler, a BLAS without ``sgemm_``), :func:`kernel` warns once and returns None, and
:func:`~multimodal.layers.positions.relative.relative_attention` keeps the skewed kernel.
``MULTIMODAL_RELATIVE_KERNEL=skew`` turns it off without a build.

Shapes: ``q`` ``(batch, heads, q_len, head_dim)``, ``k`` and ``v`` ``(batch, heads, k_len, head_dim)``,
the table ``(heads, rows, head_dim)``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import sys
import warnings
from pathlib import Path

import torch
from torch import Tensor

SOURCE = Path(__file__).with_suffix(".cpp")
"""The kernel's C++ source, shipped with the package."""

ISA_FLAGS = {
    "AVX2": ["-mavx2", "-mfma"],
    "AVX512": ["-mavx2", "-mfma", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq"],
}
"""Compiler flags for the vector instruction set PyTorch found (``torch.backends.cpu.get_cpu_capability()``);
other sets build for the compiler's default target."""


@functools.cache
def kernel():
    """The compiled extension module (``forward``, ``backward``), or None where it cannot be built."""
    if os.environ.get("MULTIMODAL_RELATIVE_KERNEL", "fused") == "skew":
        return None
    try:
        load = _cpp_extension_load()
        if shutil.which("ninja") is None:  # the pip package's binary, when its folder is not on PATH
            import ninja

            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
        # One build per vector instruction set, named after it: the cache lives in the home folder,
        # which can move to another CPU (a VM on another host), and a build for the wrong one crashes.
        isa = torch.backends.cpu.get_cpu_capability()
        flags = ["-O3", "-ffast-math", "-fopenmp", *ISA_FLAGS.get(isa, [])]
        name = f"multimodal_relative_cpu_{isa.lower()}"
        folder = _build_folder(name, SOURCE)
        if _needs_build(folder, name, SOURCE):
            print(f"multimodal: building the fused relative-attention kernel for this CPU ({isa}; once, "
                  f"about 20 seconds) in {folder}", file=sys.stderr)  # fmt: skip
        return load(name, [str(SOURCE)], extra_cflags=flags, extra_ldflags=["-fopenmp"], build_directory=str(folder))
    except Exception as error:  # any build failure means: use the skewed kernel
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        warnings.warn(f"relative attention: the fused CPU kernel could not be built ({first_line}); "
                      "using the skewed kernel", RuntimeWarning, stacklevel=2)  # fmt: skip
        return None


def _build_folder(name: str, source: Path) -> Path:
    """Where the kernel is built: one folder per name, torch version and ``source`` file under torch's
    extension cache (``$TORCH_EXTENSIONS_DIR``, else ``~/.cache/torch_extensions``); created if missing.

    The folder's name ends with a digest of the source's absolute path: the build rules ninja keeps there
    name that path, so two checkouts (a git worktree, a second virtual environment) sharing one folder
    would each rebuild the kernel (~25 s, silently) every time the other had run.
    """
    from torch.utils.cpp_extension import get_default_build_root

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()
    digest = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:8]
    folder = Path(root) / f"{name}-torch{torch.__version__}-{digest}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _needs_build(folder: Path, name: str, source: Path) -> bool:
    """Whether loading ``name`` from ``folder`` compiles: no build there yet, or ``source`` changed after the
    newest one (ninja compiles by the files' times). torch adds ``_v1``, ``_v2`` to a name rebuilt in one process."""
    built = [path.stat().st_mtime for path in folder.glob(f"{name}*.so")]
    return not built or source.stat().st_mtime > max(built)


def _cpp_extension_load():
    """``torch.utils.cpp_extension.load``, imported without its warning about ``CUDA_HOME`` on machines without CUDA."""
    extension_logger = logging.getLogger("torch.utils.cpp_extension")
    level = extension_logger.level
    extension_logger.setLevel(logging.ERROR)
    try:
        from torch.utils.cpp_extension import load
    finally:
        extension_logger.setLevel(level)
    return load


FLOAT_TYPES = (torch.float32, torch.bfloat16, torch.float16)
"""Input dtypes the kernel takes; it computes in float32 (16-bit inputs are widened on the way in)."""


def usable(q: Tensor, k: Tensor, v: Tensor, table: Tensor, dropout_p: float) -> bool:
    """Whether the fused kernel takes this call: CPU tensors of :data:`FLOAT_TYPES`, no attention dropout, and it builds."""
    on_cpu = all(t.device.type == "cpu" and t.dtype in FLOAT_TYPES for t in (q, k, v, table))
    return on_cpu and dropout_p == 0 and kernel() is not None


class FusedRelativeAttention(torch.autograd.Function):
    """Autograd wrapper of the C++ kernel; saves ``q, k, v, out``, the table and the rows' log-sum-exps.

    ``table`` is the causal-extended table of :func:`~multimodal.layers.positions.relative._with_future_rows`;
    its gradient is returned for the same rows. bf16 / fp16 inputs (autocast) are computed in float32:
    the output comes back in q's dtype and each gradient in its input's dtype, as the float32 attention
    of :mod:`multimodal.layers.sdpa` does for short sequences.
    """

    @staticmethod
    def forward(ctx, q, k, v, table, key_padding_mask, causal, query_offset, max_distance, block_size):  # type: ignore[override]
        ctx.dtypes = [t.dtype for t in (q, k, v, table)]
        q, k, v, table = (t.float().contiguous() for t in (q, k, v, table))
        padding = None if key_padding_mask is None else key_padding_mask.contiguous()
        geometry = (causal, query_offset, max_distance, block_size)
        out, lse = kernel().forward(q, k, v, table, padding, *geometry)
        ctx.save_for_backward(q, k, v, table, out, lse, padding)
        ctx.geometry = geometry
        return out.to(ctx.dtypes[0])

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, table, out, lse, padding = ctx.saved_tensors
        grads = kernel().backward(grad_out.float().contiguous(), q, k, v, table, out, lse, padding, *ctx.geometry)
        grads = [grad.to(dtype) for grad, dtype in zip(grads, ctx.dtypes, strict=True)]
        return (*grads, None, None, None, None, None)
