"""The thread policy: the user's choice wins, else the cores no other program is busy on."""

from __future__ import annotations

import pytest
import torch

from charrnn.errors import ConfigError, ConfigTypeError
from charrnn.utils import threads as threads_module
from charrnn.utils.threads import busy_cores, check_threads, choose_threads, core_times, use_threads


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


def test_core_times_reads_each_core_and_counts_io_wait_as_idle():
    text = "cpu  9 9 9 9 9 9 9 9\ncpu0 10 1 2 100 5 1 1 0 0 0\ncpu1 3 0 0 7\n"
    assert core_times(text) == {"cpu0": (15, 120), "cpu1": (3, 10)}


def test_a_core_another_program_keeps_busy_is_counted():
    before = core_times(stat_text({0: (100, 100), 1: (100, 100)}))
    after = core_times(stat_text({0: (114, 101), 1: (101, 114)}))  # cpu0 93% busy, cpu1 7%
    assert busy_cores(before, after, {0, 1}) == 1
    assert busy_cores(before, after, {1}) == 0  # a core this process may not use is not counted


def test_a_busy_core_leaves_one_thread(auto):
    read = fake_stat({0: (0, 0), 1: (0, 0)}, {0: (15, 0), 1: (0, 15)})
    choice = choose_threads(read_stat=read, sleep=lambda s: None)
    assert choice.count == 1
    assert choice.describe() == "1 (2 cores, 1 busy with other work)"


def test_a_quiet_machine_uses_every_core(auto):
    read = fake_stat({0: (0, 0), 1: (0, 0)}, {0: (1, 14), 1: (0, 15)})
    assert choose_threads(read_stat=read, sleep=lambda s: None).count == 2


def test_every_core_busy_still_runs_one_thread(auto):
    read = fake_stat({0: (0, 0), 1: (0, 0)}, {0: (15, 0), 1: (15, 0)})
    assert choose_threads(read_stat=read, sleep=lambda s: None).count == 1


def test_torchrun_processes_share_the_free_cores(auto, monkeypatch):
    monkeypatch.setattr(threads_module.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    idle = {core: (0, 15) for core in range(8)}
    read = fake_stat({core: (0, 0) for core in range(8)}, idle)
    choice = choose_threads(processes=2, read_stat=read, sleep=lambda s: None)
    assert choice.count == 4 and "shared by 2 processes" in choice.reason


def test_the_users_choice_wins_and_is_not_watched(auto, monkeypatch):
    def never() -> str:
        raise AssertionError("the cores were watched")

    assert choose_threads(2, read_stat=never) == threads_module.ThreadChoice(2, "--threads", given=True)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert choose_threads(read_stat=never) == threads_module.ThreadChoice(2, "OMP_NUM_THREADS", given=True)


def test_no_proc_stat_leaves_torchs_default(auto):
    def missing() -> str:
        raise FileNotFoundError("/proc/stat")

    assert choose_threads(read_stat=missing, sleep=lambda s: None) is None


@pytest.mark.parametrize("bad", [0, -1, 2**40, 10**20])
def test_a_thread_count_out_of_range_is_refused(bad):
    with pytest.raises(ConfigError, match="threads must be a whole number of at least 1 \\(at most 1,024\\)"):
        check_threads(bad)


@pytest.mark.parametrize("bad", [1.5, 2.0, True, "2"])
def test_a_thread_count_of_another_type_is_a_type_error(bad):
    with pytest.raises(ConfigTypeError, match="threads must be a whole number"):
        check_threads(bad)


@pytest.mark.parametrize("bad", ["0", "abc", "1.5", "-2", "²", "٣", "99999"])
def test_an_omp_num_threads_that_is_no_thread_count_is_refused_not_ignored(monkeypatch, bad):
    monkeypatch.setenv("OMP_NUM_THREADS", bad)
    with pytest.raises(ConfigError, match="OMP_NUM_THREADS must be a whole number from 1 to 1,024"):
        choose_threads()


def test_a_blank_omp_num_threads_is_unset(auto):
    threads_module.os.environ["OMP_NUM_THREADS"] = "  "
    try:
        read = fake_stat({0: (0, 0), 1: (0, 0)}, {0: (0, 15), 1: (0, 15)})
        assert choose_threads(read_stat=read, sleep=lambda s: None).count == 2
    finally:
        del threads_module.os.environ["OMP_NUM_THREADS"]


def test_more_threads_than_cores_are_taken_and_said(auto):
    assert choose_threads(5).describe() == "5 (--threads, more than the 2 cores this process may use)"


def test_one_core_is_named_in_the_singular(auto, monkeypatch):
    monkeypatch.setattr(threads_module.os, "sched_getaffinity", lambda pid: {1}, raising=False)
    read = fake_stat({1: (0, 0)}, {1: (0, 15)})
    assert choose_threads(read_stat=read, sleep=lambda s: None).describe() == "1 (1 core, free)"


def test_use_threads_sets_torch():
    before = torch.get_num_threads()
    try:
        assert use_threads(2).count == 2
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_the_load_watch_counts_the_cores_other_programs_kept_busy(auto):
    """Two cores for 10 s: 2,000 ticks of which 1,500 busy; this process used 5 s of CPU time itself,
    so other programs kept one core busy. A user's own thread count is marked as given."""
    import os

    from charrnn.utils.threads import LoadWatch

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
