import subprocess
import sys

import pytest

from charrnn.errors import CharrnnError
from charrnn.utils.hardware import (
    CPU_BF16_ENV,
    NATIVE_BF16_FLAGS,
    cpu_flags,
    cpu_has_native_bf16,
    model_name,
    process_age_s,
)

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
