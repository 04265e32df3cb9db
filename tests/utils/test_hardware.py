from charrnn.utils.hardware import NATIVE_BF16_FLAGS, cpu_flags, model_name

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
