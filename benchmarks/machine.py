"""The machine line a speed benchmark prints first: which CPU, which of its units PyTorch can use.

This VM's CPU is not always the same kind (an AVX2-only CPU in the text measurements of
2026-11-29/30, an AVX-512 CPU with AMX on 2026-12-06), and which it is can decide more than the
day's speed does: bf16 matrix products ran 5.3x float32's on the AMX CPU and 6x slower than
float32 on the AVX2 one (docs/benchmarks.md). So every speed table says which CPU made it.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

_MATRIX_UNITS = {"amx_bf16": "AMX-BF16", "avx512_bf16": "AVX-512-BF16"}


def machine() -> str:
    """One line: CPU model, PyTorch's vector ISA, bf16 units, cores, torch threads and version."""
    model, flags = _cpuinfo()
    units = [name for flag, name in _MATRIX_UNITS.items() if flag in flags] or ["no bf16 units"]
    return (
        f"{model or platform.processor() or platform.machine()} · {torch.backends.cpu.get_cpu_capability()} · "
        f"{', '.join(units)} · "
        f"{os.cpu_count()} cores · {torch.get_num_threads()} threads · torch {torch.__version__}"
    )


def _cpuinfo() -> tuple[str, set[str]]:
    """The first processor's model name and flags in /proc/cpuinfo (empty where there is none)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "", set()
    fields = {}
    for line in lines:
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields.get("model name", ""), set(fields.get("flags", "").split())
