"""What the processor can do, read without importing torch."""

from __future__ import annotations

from functools import cache
from pathlib import Path

# Either flag means bfloat16 arithmetic in hardware, which oneDNN's CPU LSTM/GRU kernels use under
# autocast; without them bfloat16 is emulated and slower than float32.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first processor listed in a ``/proc/cpuinfo`` text."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


@cache
def cpu_has_native_bf16() -> bool:
    """True when this machine's processor has AVX512-BF16 or AMX-BF16 (Linux only; False elsewhere)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return bool(cpu_flags(cpuinfo) & NATIVE_BF16_FLAGS)
