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

import numbers
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from charrnn.errors import ConfigError, ConfigTypeError

BUSY_LOOK_S = 0.15  # how long the cores' use is watched before choosing
BUSY_SHARE = 0.5  # a core another program used for at least this share of the look is busy
MOST_THREADS = 1024  # the most threads a user may ask for (torch takes a 32-bit count; OpenMP far fewer)


@dataclass(frozen=True)
class ThreadChoice:
    """The threads torch runs with, and why."""

    count: int  # torch's intra-op threads
    reason: str  # what chose it, for the run table: "--threads", "OMP_NUM_THREADS", or the cores seen

    def describe(self) -> str:
        return f"{self.count} ({self.reason})"


def check_threads(threads: int | None) -> int | None:
    """A requested thread count: None (charrnn chooses) or a whole number from 1 to :data:`MOST_THREADS`.
    ``OMP_NUM_THREADS`` is checked too, before torch reads it."""
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
    """``OMP_NUM_THREADS`` when set to a thread count; unset or blank: None. Anything else is refused:
    it names the user's choice, so it is never silently ignored."""
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
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    more = f", more than the {_cores(len(cores))} this process may use"
    if requested is not None:
        return ThreadChoice(requested, "--threads" + (more if requested > len(cores) else ""))
    from_environment = _from_environment()
    if from_environment is not None:
        beyond = more if from_environment > len(cores) else ""
        return ThreadChoice(from_environment, "OMP_NUM_THREADS" + beyond)
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
        return ThreadChoice(free, f"{_cores(len(cores))}, {busy} busy with other work{shared}")
    return ThreadChoice(free, f"{_cores(len(cores))}, {'all free' if len(cores) > 1 else 'free'}{shared}")


def _cores(count: int) -> str:
    return f"{count} core{'s' if count != 1 else ''}"


def use_threads(requested: int | None = None, processes: int = 1) -> ThreadChoice | None:
    """Choose (:func:`choose_threads`) and set torch's thread count; the choice, or None where torch's
    default stands."""
    choice = choose_threads(requested, processes)
    if choice is not None:
        import torch

        torch.set_num_threads(choice.count)
    return choice
