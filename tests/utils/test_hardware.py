import subprocess
import sys

from charrnn.utils.hardware import NATIVE_BF16_FLAGS, cpu_flags, model_name, process_age_s

XEON = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n\n"
EPYC = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f\n"


def test_cpu_flags_read_the_first_flags_line():
    assert {"avx512_bf16", "amx_bf16"} <= cpu_flags(XEON)
    assert cpu_flags(EPYC) & NATIVE_BF16_FLAGS == set()
    assert cpu_flags("") == frozenset()


def test_the_model_name_is_the_first_processors():
    assert model_name(XEON) == "Intel(R) Xeon(R)"
    assert model_name(EPYC) == "AMD EPYC"
    assert model_name("") == "unknown"


def test_a_process_knows_how_long_it_has_run():
    """A time budget counts the interpreter's start: a process that slept half a second first says so."""
    probe = ("import time; time.sleep(0.5); from charrnn.utils.hardware import process_age_s; "
             "print(process_age_s())")
    printed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    age = float(printed)
    assert 0.5 <= age < 30
    assert process_age_s() > 0


def test_without_proc_the_age_is_zero(monkeypatch):
    from pathlib import Path

    def unreadable(*args, **kwargs):
        raise OSError("no /proc here")

    monkeypatch.setattr(Path, "read_text", unreadable)
    assert process_age_s() == 0.0
