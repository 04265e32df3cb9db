"""How many CPU threads torch uses: the cores no other program is keeping busy (docs/performance.md,
"Threads on a busy machine").

torch starts one OpenMP thread per core, and its parallel regions wait for every one of them. When
another program keeps a core busy, the thread scheduled there runs a fraction of the time and the
others wait for it at every operation: on a 2-core EPYC with one core busy, a training step took 3.7×
its quiet time with two threads and none more with one. So charrnn counts the cores other programs
are using over a short look at ``/proc/stat`` and runs on the rest. The user's own choice
(``--threads``, ``threads=``, or ``OMP_NUM_THREADS``) always wins. Nothing here imports torch at
module level.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from charrnn.errors import ConfigError

BUSY_LOOK_S = 0.15  # how long the cores' use is watched before choosing
BUSY_SHARE = 0.5  # a core another program used for at least this share of the look is busy


@dataclass(frozen=True)
class ThreadChoice:
    """The threads torch runs with, and why."""

    count: int  # torch's intra-op threads
    reason: str  # what chose it, for the run table: "--threads", "OMP_NUM_THREADS", or the cores seen

    def describe(self) -> str:
        return f"{self.count} ({self.reason})"


def check_threads(threads: int | None) -> int | None:
    """A requested thread count: None (charrnn chooses) or a whole number of at least 1."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"must be a whole number of at least 1, not {threads!r}", "threads")
    return threads


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
    busy = 0
    for core in cores:
        name = f"cpu{core}"
        if name not in before or name not in after:
            continue
        used = after[name][0] - before[name][0]
        elapsed = after[name][1] - before[name][1]
        if elapsed > 0 and used >= BUSY_SHARE * elapsed:
            busy += 1
    return busy


def _read_stat() -> str:
    return Path("/proc/stat").read_text()


def choose_threads(requested: int | None = None, processes: int = 1,
                   read_stat: Callable[[], str] = _read_stat,
                   sleep: Callable[[float], None] = time.sleep) -> ThreadChoice | None:
    """The threads to run with: ``requested`` when given, else ``OMP_NUM_THREADS`` when set, else the
    cores this process may use that no other program kept busy while watched, shared among
    ``processes`` (torchrun's processes on this machine), at least 1. None where the cores cannot be
    watched (no ``/proc/stat``): torch's own default stands."""
    requested = check_threads(requested)
    if requested is not None:
        return ThreadChoice(requested, "--threads")
    from_environment = os.environ.get("OMP_NUM_THREADS", "").strip()
    if from_environment.isdigit() and int(from_environment) >= 1:
        return ThreadChoice(int(from_environment), "OMP_NUM_THREADS")
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    try:
        before = core_times(read_stat())
        sleep(BUSY_LOOK_S)
        after = core_times(read_stat())
    except (OSError, ValueError):
        return None
    busy = busy_cores(before, after, cores)
    free = max(1, (len(cores) - busy) // max(processes, 1))
    shared = f", shared by {processes} processes" if processes > 1 else ""
    if busy:
        return ThreadChoice(free, f"{len(cores)} cores, {busy} busy with other work{shared}")
    return ThreadChoice(free, f"{len(cores)} cores, all free{shared}")


def use_threads(requested: int | None = None, processes: int = 1) -> ThreadChoice | None:
    """Choose (:func:`choose_threads`) and set torch's thread count; the choice, or None where torch's
    default stands."""
    choice = choose_threads(requested, processes)
    if choice is not None:
        import torch

        torch.set_num_threads(choice.count)
    return choice
