"""What the machine can do (native bfloat16, available memory, torch's CPU threads), read without torch."""

from __future__ import annotations

import numbers
import os
import re
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from charrnn.errors import CharrnnError, ConfigError, ConfigTypeError
from charrnn.utils.terminal import counted

# Either flag means bfloat16 arithmetic in hardware, which oneDNN's CPU LSTM/GRU kernels use under
# autocast; without them bfloat16 is emulated and slower than float32.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first processor listed in a ``/proc/cpuinfo`` text."""
    flags = (value for key, _, value in (line.partition(":") for line in cpuinfo.splitlines())
             if key.strip() in ("flags", "Features"))
    return frozenset(next(flags, "").split())


def model_name(cpuinfo: str) -> str:
    """The model name of the first processor listed in a ``/proc/cpuinfo`` text ("unknown" if none)."""
    names = (value for key, _, value in (line.partition(":") for line in cpuinfo.splitlines())
             if key.strip() == "model name")
    return next(names, "unknown").strip()


def process_age_s() -> float:
    """Seconds since this process started (0.0 without Linux's ``/proc``): a time budget counts start-up."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


@cache
def _cpuinfo() -> str:
    """This machine's ``/proc/cpuinfo`` (Linux only; "" where it cannot be read)."""
    with suppress(OSError):
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    return ""


def processor_name() -> str:
    """This machine's CPU model: figures differ between machines, so measurements name it."""
    return model_name(_cpuinfo())


@cache
def machine_description(device: str) -> str:
    """What a run trains on, for its checkpoints: the GPU's name, or the processor's and its core count."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    cores = f"{os.cpu_count()} cores" if os.cpu_count() else "cores unknown"
    return f"{processor_name()}, {cores}" if device == "cpu" else f"{device} ({processor_name()}, {cores})"


def cpu_has_native_bf16() -> bool:
    """True when this machine's processor has AVX512-BF16 or AMX-BF16 (Linux only; False elsewhere), or
    as :data:`CPU_BF16_ENV` says: "0" treats the processor as one without, "1" as one with."""
    forced = cpu_bf16_setting()
    return bool(cpu_flags(_cpuinfo()) & NATIVE_BF16_FLAGS) if forced is None else forced


def cpu_bf16_setting() -> bool | None:
    """What :data:`CPU_BF16_ENV` says (None: unset or empty), refused unless 0 or 1. Every command checks
    it first, so that a mistyped value is never ignored by a command that has no use for it."""
    if not (forced := os.environ.get(CPU_BF16_ENV)):  # unset or empty
        return None
    if forced not in ("0", "1"):
        raise CharrnnError(f"{CPU_BF16_ENV} must be 0 (no native bfloat16) or 1 (native bfloat16), "
                           f"not {forced!r}; unset it to detect the processor's")
    return forced == "1"


# Set to "0", charrnn treats the processor as one without native bfloat16 (--precision auto trains in
# float32, and bf16 is refused); "1", as one with it. For comparing the two, and testing both on one machine.
CPU_BF16_ENV = "CHARRNN_CPU_BF16"


def available_host_memory() -> int | None:
    """Bytes of memory available to a new allocation here (``MemAvailable``); None where unknown."""
    with suppress(OSError):
        for line in Path("/proc/meminfo").read_text(encoding="ascii", errors="replace").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


# ---------------------------------------------------------------------------- threads
# The cores no other program keeps busy (docs/performance.md, "Threads on a busy machine"): torch's parallel
# regions wait for every thread, so one on a busy core stalls them all. The user's choice (--threads,
# threads=, OMP_NUM_THREADS) always wins.

BUSY_LOOK_S = 0.15  # how long the cores' use is watched before choosing
BUSY_SHARE = 0.5  # a core another program used for at least this share of the look is busy
MOST_THREADS = 1024  # the most threads a user may ask for (torch takes a 32-bit count; OpenMP far fewer)


@dataclass(frozen=True)
class ThreadChoice:
    """The threads torch runs with, and why."""

    count: int  # torch's intra-op threads
    reason: str  # what chose it, for the run table: "--threads", "OMP_NUM_THREADS", or the cores seen
    given: bool = False  # the user's own count (--threads, threads=, OMP_NUM_THREADS): never changed

    def describe(self) -> str:
        return f"{self.count} ({self.reason})"


def check_threads(threads: int | None) -> int | None:
    """A requested thread count, None (charrnn chooses) or 1 to :data:`MOST_THREADS`; OMP_NUM_THREADS too."""
    _from_environment()
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral):
        raise ConfigTypeError(f"must be a whole number of at least 1, not {threads!r}", "threads")
    if not 1 <= threads <= MOST_THREADS:
        raise ConfigError(f"must be a whole number of at least 1 (at most {MOST_THREADS:,}), not {threads!r}",
                          "threads")
    return int(threads)


def _from_environment() -> int | None:
    """``OMP_NUM_THREADS`` as a thread count (unset or blank: None); anything else is refused, not ignored."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    if not value:
        return None
    if not re.fullmatch(r"[0-9]+", value) or not 1 <= int(value) <= MOST_THREADS:
        raise ConfigError(f"OMP_NUM_THREADS must be a whole number from 1 to {MOST_THREADS:,}, not {value!r}")
    return int(value)


def core_times(stat: str) -> dict[str, tuple[int, int]]:
    """Each core's (busy, total) clock ticks from a ``/proc/stat`` text: ``cpu0``, ``cpu1``, ..."""
    times = {}
    for line in stat.splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or len(fields) < 4:
            continue
        ticks = [int(value) for value in fields[:8]]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle and waiting for I/O
        times[name] = (sum(ticks) - idle, sum(ticks))
    return times


def busy_cores(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]],
               cores: set[int]) -> int:
    """How many of ``cores`` were at least :data:`BUSY_SHARE` busy between two :func:`core_times`."""
    spans = [(after[name][0] - before[name][0], after[name][1] - before[name][1])  # (busy, total) ticks
             for name in (f"cpu{core}" for core in cores) if name in before and name in after]
    return sum(total > 0 and busy >= BUSY_SHARE * total for busy, total in spans)


_read_stat = Path("/proc/stat").read_text  # each core's clock ticks, read afresh at every call


def usable_cores() -> set[int]:
    """The cores this process may run on."""
    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))


def choose_threads(requested: int | None = None, processes: int = 1,
                   read_stat: Callable[[], str] = _read_stat,
                   sleep: Callable[[float], None] = time.sleep) -> ThreadChoice | None:
    """The threads: ``requested``, else ``OMP_NUM_THREADS``, else the usable cores no other program kept busy
    while watched, shared among ``processes`` (at least 1); None without ``/proc/stat`` (torch's default)."""
    requested = check_threads(requested)
    cores = usable_cores()
    named = counted(len(cores), "core")
    more = f", more than the {named} this process may use"
    for count, source in ((requested, "--threads"), (_from_environment(), "OMP_NUM_THREADS")):
        if count is not None:  # the user's own choice
            return ThreadChoice(count, source + (more if count > len(cores) else ""), given=True)
    try:
        before = core_times(read_stat())
        sleep(BUSY_LOOK_S)
        after = core_times(read_stat())
    except (OSError, ValueError):
        return None
    busy = busy_cores(before, after, cores)
    free = max(1, (len(cores) - busy) // max(processes, 1))
    shared = f", shared by {processes} processes" if processes > 1 else ""
    seen = f"{busy} busy with other work" if busy else "all free" if len(cores) > 1 else "free"
    return ThreadChoice(free, f"{named}, {seen}{shared}")


def use_threads(requested: int | None = None, processes: int = 1) -> ThreadChoice | None:
    """Set torch's thread count to :func:`choose_threads`'s choice, returned (None: torch's default)."""
    choice = choose_threads(requested, processes)
    if choice is not None:
        import torch

        torch.set_num_threads(choice.count)
    return choice


class LoadWatch:
    """How many cores other programs keep busy while this process works: the cores' busy time over a
    stretch (``/proc/stat``), less this process's own CPU time; without ``/proc/stat`` it sees nothing."""

    def __init__(self, read_stat: Callable[[], str] = _read_stat,
                 own_cpu_s: Callable[[], float] = time.process_time,
                 clock: Callable[[], float] = time.perf_counter):
        self.read_stat, self.own_cpu_s, self.clock = read_stat, own_cpu_s, clock
        self.start()

    def start(self) -> None:
        """Begin a new stretch."""
        self.began = (self._busy_s(), self.own_cpu_s(), self.clock())

    def _busy_s(self) -> float | None:
        try:
            ticks = sum(busy for busy, _ in core_times(self.read_stat()).values())
        except (OSError, ValueError):
            return None
        return ticks / os.sysconf("SC_CLK_TCK")

    def others_busy(self) -> int:
        """Cores' worth of work other programs did since the stretch began, rounded."""
        busy, own, now = self._busy_s(), self.own_cpu_s(), self.clock()
        began_busy, began_own, began = self.began
        if busy is None or began_busy is None or now <= began:
            return 0
        others = (busy - began_busy) - (own - began_own)
        return max(0, round(others / (now - began)))

    def leave_busy_cores(self) -> str | None:
        """Use the cores other programs leave free, if fewer than torch's threads; what to say or None."""
        import torch

        others = self.others_busy()
        self.start()
        cores = len(usable_cores())
        left = max(1, cores - others)
        if left >= torch.get_num_threads():
            return None
        torch.set_num_threads(left)
        return (f"other programs keep {others} of this machine's {cores} cores busy: training goes on with "
                f"{counted(left, 'thread')}")
