import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from charrnn.errors import CharrnnError, ConfigError, ConfigTypeError
from charrnn.utils import hardware as threads_module
from charrnn.utils.hardware import (
    CPU_BF16_ENV,
    NATIVE_BF16_FLAGS,
    LoadWatch,
    busy_cores,
    check_threads,
    choose_threads,
    core_times,
    cpu_flags,
    cpu_has_native_bf16,
    model_name,
    process_age_s,
    use_threads,
)

XEON = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n\n"
EPYC = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f\n"


def test_the_flags_and_model_name_are_the_first_processors():
    assert {"avx512_bf16", "amx_bf16"} <= cpu_flags(XEON)
    assert cpu_flags(EPYC) & NATIVE_BF16_FLAGS == set()
    assert cpu_flags("") == frozenset()
    assert [model_name(text) for text in (XEON, EPYC, "")] == ["Intel(R) Xeon(R)", "AMD EPYC", "unknown"]


def test_a_process_knows_how_long_it_has_run(monkeypatch):
    """A time budget counts the interpreter's start: a process that slept half a second first says so."""
    probe = ("import time; time.sleep(0.5); from charrnn.utils.hardware import process_age_s; "
             "print(process_age_s())")
    printed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    age = float(printed)
    assert 0.5 <= age < 30
    assert process_age_s() > 0
    monkeypatch.setattr(Path, "read_text", lambda *args, **kwargs: (_ for _ in ()).throw(OSError("no /proc")))
    assert process_age_s() == 0.0  # without /proc, the age is zero


@pytest.mark.parametrize("value", ["0", "1"])
def test_the_environment_can_say_whether_the_cpu_has_native_bf16(monkeypatch, value):
    monkeypatch.setenv(CPU_BF16_ENV, value)
    assert cpu_has_native_bf16() is (value == "1")
    monkeypatch.delenv(CPU_BF16_ENV)
    detected = cpu_has_native_bf16()
    monkeypatch.setenv(CPU_BF16_ENV, "")  # empty: as if unset, the processor's own flags
    assert cpu_has_native_bf16() is detected


@pytest.mark.parametrize("value", ["yes", "true", " 1", "2"])
def test_any_other_value_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(CPU_BF16_ENV, value)
    with pytest.raises(CharrnnError, match=f"{CPU_BF16_ENV} must be 0 .* or 1 .*not {value!r}"):
        cpu_has_native_bf16()


# ---------------------------------------------------------------------------- threads

def stat_text(ticks: dict[int, tuple[int, int]]) -> str:
    """A /proc/stat text whose cpuN lines have (busy user ticks, idle ticks)."""
    lines = ["cpu  1 2 3 4 5 6 7 8 0 0"]
    lines += [f"cpu{core} {busy} 0 0 {idle} 0 0 0 0 0 0" for core, (busy, idle) in ticks.items()]
    return "\n".join(lines + ["intr 1 2 3", "ctxt 99"]) + "\n"


def fake_stat(*readings: dict[int, tuple[int, int]]):
    texts = iter(stat_text(reading) for reading in readings)
    return lambda: next(texts)


@pytest.fixture
def auto(monkeypatch):
    """No OMP_NUM_THREADS, and two cores to run on."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads_module.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)


def test_core_times_count_io_wait_as_idle_and_a_core_another_program_keeps_busy_is_counted():
    text = "cpu  9 9 9 9 9 9 9 9\ncpu0 10 1 2 100 5 1 1 0 0 0\ncpu1 3 0 0 7\n"
    assert core_times(text) == {"cpu0": (15, 120), "cpu1": (3, 10)}
    before = core_times(stat_text({0: (100, 100), 1: (100, 100)}))
    after = core_times(stat_text({0: (114, 101), 1: (101, 114)}))  # cpu0 93% busy, cpu1 7%
    assert busy_cores(before, after, {0, 1}) == 1
    assert busy_cores(before, after, {1}) == 0  # a core this process may not use is not counted


@pytest.mark.parametrize(("after", "said"), [
    ({0: (15, 0), 1: (0, 15)}, "1 (2 cores, 1 busy with other work)"),  # a busy core leaves one thread
    ({0: (1, 14), 1: (0, 15)}, "2 (2 cores, all free)"),  # a quiet machine uses every core
    ({0: (15, 0), 1: (15, 0)}, "1 (2 cores, 2 busy with other work)"),  # every core busy: still one
])
def test_the_threads_are_the_cores_no_other_program_keeps_busy(auto, after, said):
    choice = choose_threads(read_stat=fake_stat({0: (0, 0), 1: (0, 0)}, after), sleep=lambda s: None)
    assert choice.describe() == said and choice.count == int(said[0])


def test_torchrun_processes_share_the_free_cores_and_a_blank_omp_num_threads_is_unset(auto, monkeypatch):
    monkeypatch.setattr(threads_module.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "  ")
    idle = {core: (0, 15) for core in range(8)}
    read = fake_stat({core: (0, 0) for core in range(8)}, idle)
    choice = choose_threads(processes=2, read_stat=read, sleep=lambda s: None)
    assert choice.count == 4 and "shared by 2 processes" in choice.reason


def test_the_users_choice_wins_is_not_watched_and_is_what_use_threads_sets(auto, monkeypatch):
    def never() -> str:
        raise AssertionError("the cores were watched")

    assert choose_threads(2, read_stat=never) == threads_module.ThreadChoice(2, "--threads", given=True)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert choose_threads(read_stat=never) == threads_module.ThreadChoice(2, "OMP_NUM_THREADS", given=True)
    before = torch.get_num_threads()
    try:
        assert use_threads(2).count == 2
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_no_proc_stat_leaves_torchs_default(auto):
    missing = FileNotFoundError("/proc/stat")
    assert choose_threads(read_stat=lambda: (_ for _ in ()).throw(missing), sleep=lambda s: None) is None


@pytest.mark.parametrize(("bad", "error", "said"), [
    *((value, ConfigError, " of at least 1 \\(at most 1,024\\)") for value in (0, -1, 2**40, 10**20)),
    *((value, ConfigTypeError, "") for value in (1.5, 2.0, True, "2")),  # of another type: a type error
])
def test_a_thread_count_out_of_range_or_of_another_type_is_refused(bad, error, said):
    with pytest.raises(error, match="threads must be a whole number" + said):
        check_threads(bad)


@pytest.mark.parametrize("bad", ["0", "abc", "1.5", "-2", "²", "٣", "99999"])
def test_an_omp_num_threads_that_is_no_thread_count_is_refused_not_ignored(monkeypatch, bad):
    monkeypatch.setenv("OMP_NUM_THREADS", bad)
    with pytest.raises(ConfigError, match="OMP_NUM_THREADS must be a whole number from 1 to 1,024"):
        choose_threads()


def test_more_threads_than_cores_are_taken_and_said_and_one_core_is_named_in_the_singular(auto, monkeypatch):
    assert choose_threads(5).describe() == "5 (--threads, more than the 2 cores this process may use)"
    monkeypatch.setattr(threads_module.os, "sched_getaffinity", lambda pid: {1}, raising=False)
    read = fake_stat({1: (0, 0)}, {1: (0, 15)})
    assert choose_threads(read_stat=read, sleep=lambda s: None).describe() == "1 (1 core, free)"


def test_the_load_watch_counts_the_cores_other_programs_kept_busy(auto):
    """2 cores, 10 s, 1,500 of 2,000 ticks busy, 500 ours: others kept 1 busy; a user's count is given."""
    hertz = os.sysconf("SC_CLK_TCK")
    stats = iter([f"cpu0 0 0 0 {10 * hertz} 0\ncpu1 0 0 0 {10 * hertz} 0\n",
                  f"cpu0 {10 * hertz} 0 0 {10 * hertz} 0\ncpu1 {5 * hertz} 0 0 {15 * hertz} 0\n"])
    own, clock = iter([1.0, 6.0]), iter([100.0, 110.0])
    watch = LoadWatch(read_stat=lambda: next(stats), own_cpu_s=lambda: next(own), clock=lambda: next(clock))
    assert watch.others_busy() == 1
    unreadable = LoadWatch(read_stat=lambda: (_ for _ in ()).throw(OSError("no /proc")))
    assert unreadable.others_busy() == 0
    assert choose_threads(3).given
    assert not choose_threads(None, read_stat=lambda: "cpu0 0 0 0 1 0\n", sleep=lambda s: None).given
