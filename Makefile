# The two quickstart commands (see README): `make demo` and `make test`.
# Each creates the virtual environment on first use, so both work on a fresh clone.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
# The CPU wheel; override (e.g. TORCH_SPEC='torch>=2.2,<3') for a CUDA build.
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
# The tests run in one process per core (pytest-xdist), at most four: most of their time is single-threaded
# (subprocesses starting, files written and read); an idle process takes tests queued for a busy one.
PYTEST := $(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist worksteal

.PHONY: setup demo test test-fast lint

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@echo "setting up $(VENV): $(TORCH_SPEC) and charrnn with its test tools (a minute or two, once)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev,plot]"
	touch $@

# A fresh run directory each time: an earlier demo (or the user's own run) is never replaced.
DEMO_RUN := checkpoints/demo-$(shell date +%Y%m%d-%H%M%S)

demo: setup
	@echo "the demo: fetch tiny Shakespeare (1.1 MB, once), train for 2 minutes, then write 600 characters"
	$(BIN)/charrnn train --time-budget 120 --out $(DEMO_RUN)
	$(BIN)/charrnn sample $(DEMO_RUN)/best.pt --prime "ROMEO:" --length 600 --temperature 0.8 --seed 1
	@echo "the model is in $(DEMO_RUN); run charrnn as $(BIN)/charrnn, or after: source $(BIN)/activate"

lint: setup
	$(BIN)/ruff check .

# The whole suite, then the quick tests again as on a processor of the other kind (with native bfloat16
# or without: CHARRNN_CPU_BF16) and with AVX2 at most, as most laptops have: every path passes on any machine.
AS_AVX2 := MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2
test: lint
	$(PYTEST)
	$(AS_AVX2) CHARRNN_CPU_BF16=$$($(BIN)/python -c "from charrnn.utils.hardware import cpu_has_native_bf16 as native; \
	print(int(not native()))") $(PYTEST) -m "not slow"

# Everything but the tests marked slow (real subprocesses, torchrun, fuzzing): for the edit-test loop.
test-fast: lint
	$(PYTEST) -m "not slow"
