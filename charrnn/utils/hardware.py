"""What the machine can do: native bfloat16, available memory. Read without importing torch."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from charrnn.errors import CharrnnError

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


def model_name(cpuinfo: str) -> str:
    """The model name of the first processor listed in a ``/proc/cpuinfo`` text ("unknown" if none)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return "unknown"


def process_age_s() -> float:
    """Seconds since this process started (Linux: from ``/proc``; 0.0 where that cannot be read), so a
    time budget can count the interpreter's start-up too."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def processor_name() -> str:
    """This machine's CPU model: figures differ between machines, so measurements name it."""
    try:
        return model_name(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return "unknown"


@cache
def machine_description(device: str) -> str:
    """What a run trains on, for its checkpoints and model card: the GPU's name, or the processor's and
    its core count."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    cores = f"{os.cpu_count()} cores" if os.cpu_count() else "cores unknown"
    return f"{processor_name()}, {cores}" if device == "cpu" else f"{device} ({processor_name()}, {cores})"


def cpu_has_native_bf16() -> bool:
    """True when this machine's processor has AVX512-BF16 or AMX-BF16 (Linux only; False elsewhere), or
    as :data:`CPU_BF16_ENV` says: "0" treats the processor as one without, "1" as one with."""
    forced = cpu_bf16_setting()
    return _cpuinfo_has_bf16() if forced is None else forced


def cpu_bf16_setting() -> bool | None:
    """What :data:`CPU_BF16_ENV` says (None: unset or empty), refused unless 0 or 1. Every command checks
    it first, so that a mistyped value is never ignored by a command that has no use for it."""
    forced = os.environ.get(CPU_BF16_ENV)
    if forced is None or forced == "":
        return None
    if forced not in ("0", "1"):
        raise CharrnnError(f"{CPU_BF16_ENV} must be 0 (no native bfloat16) or 1 (native bfloat16), "
                           f"not {forced!r}; unset it to detect the processor's")
    return forced == "1"


# Set to "0", charrnn treats the processor as one without native bfloat16 (--precision auto trains in
# float32, and bf16 is refused); "1", as one with it. For comparing the two, and testing both on one machine.
CPU_BF16_ENV = "CHARRNN_CPU_BF16"


@cache
def _cpuinfo_has_bf16() -> bool:
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return bool(cpu_flags(cpuinfo) & NATIVE_BF16_FLAGS)


def meminfo_available(meminfo: str) -> int | None:
    """``MemAvailable`` of a ``/proc/meminfo`` text, in bytes."""
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def available_host_memory() -> int | None:
    """Bytes of memory available to a new allocation on this machine; None where unknown."""
    try:
        found = meminfo_available(Path("/proc/meminfo").read_text(encoding="ascii", errors="replace"))
    except OSError:
        found = None
    if found is not None:
        return found
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
