"""How large and how tangled the package is (not part of CI).

Prints, for the ``charrnn/`` package of this checkout:

- its lines, and the longest functions;
- the imports between its sub-packages, and any that run upward (a floor importing
  one above it, in the order of docs/how-it-works.md);
- what ``charrnn train`` runs from the command line to its first optimiser step:
  the package's files and functions it passes, its calls and the switches from one
  file to another (traced with ``sys.setprofile``), on a small corpus, once for a
  fixed run and once with ``--time-budget``;
- how long ``charrnn train --lr -1`` takes to be refused, against ``import torch``
  (medians of five fresh interpreters).

    python benchmarks/house.py
"""

from __future__ import annotations

import ast
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "charrnn"
# The floors, lowest first: a module may import its own floor's neighbours only where named side by side.
FLOORS = {"config": 0, "errors": 0, "utils": 0, "__init__": 0, "__main__": 6,
          "models": 1, "data": 1, "training": 2, "generation": 2, "analysis": 3, "api": 4, "cli": 5}

TRACER = r"""
import json, os, sys, torch.optim.optimizer as optimizer
package = os.path.join(sys.argv[1], "charrnn") + os.sep
calls, files, functions, switches, last = [0], set(), set(), [0], [None]

def profile(frame, event, arg):
    if event != "call" or not frame.f_code.co_filename.startswith(package):
        return
    name = frame.f_code.co_filename[len(package):]
    calls[0] += 1
    files.add(name)
    functions.add((name, frame.f_code.co_qualname))
    if last[0] is not None and last[0] != name:
        switches[0] += 1
    last[0] = name

def first_step(*_):
    sys.setprofile(None)
    print(json.dumps({"files": len(files), "functions": len(functions), "calls": calls[0],
                      "switches": switches[0]}), flush=True)
    os._exit(0)

optimizer.register_optimizer_step_pre_hook(first_step)
from charrnn.cli.main import main
sys.argv = ["charrnn", *sys.argv[2:]]
sys.setprofile(profile)
main()
"""


def lines() -> tuple[int, list[tuple[int, str]]]:
    total, functions = 0, []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        total += source.count("\n")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                functions.append((node.end_lineno - node.lineno + 1, where))
    return total, sorted(functions, reverse=True)[:10]


def floor_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports() -> tuple[Counter[tuple[str, str]], list[str]]:
    arrows: Counter[tuple[str, str]] = Counter()
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        here = floor_of(module)
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                if not name.startswith("charrnn."):
                    continue
                there = floor_of(name)
                if there != here:
                    arrows[here, there] += 1
                    if FLOORS[there] > FLOORS[here]:
                        upward.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    return arrows, upward


def trace(*options: str) -> dict[str, int]:
    with tempfile.TemporaryDirectory() as scratch:
        corpus = Path(scratch) / "corpus.txt"
        corpus.write_text("The quick brown fox jumps over the lazy dog.\n" * 4000)
        command = [sys.executable, "-c", TRACER, str(ROOT), "train", str(corpus),
                   "--out", str(Path(scratch) / "run"), *options]
        done = subprocess.run(command, capture_output=True, text=True, cwd=scratch,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
        last = done.stdout.strip().splitlines()[-1:] or ["{}"]
        try:
            return json.loads(last[0])
        except json.JSONDecodeError:
            raise SystemExit(f"the trace failed: {done.stderr.strip()[-500:]}") from None


def median_seconds(command: list[str]) -> float:
    times = []
    for _ in range(5):
        began = time.perf_counter()
        subprocess.run(command, capture_output=True, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    total, longest = lines()
    print(f"lines in charrnn/: {total:,}\n\nlongest functions:")
    for length, where in longest:
        print(f"  {length:4d}  {where}")
    arrows, upward = imports()
    print(f"\nimports between sub-packages: {sum(arrows.values())} statements, {len(arrows)} arrows")
    for (here, there), count in sorted(arrows.items()):
        print(f"  {here:>10} -> {there:<10} {count}")
    print(f"imports running upward: {len(upward)}")
    for line in upward:
        print(f"  {line}")
    for label, options in (("fixed", ("--epochs", "1")), ("time budget", ("--time-budget", "20"))):
        figures = trace(*options)
        print(f"\ntrain ({label}) to the first optimiser step: {figures.get('files')} files, "
              f"{figures.get('functions')} functions, {figures.get('calls')} calls, "
              f"{figures.get('switches')} switches between files")
    refuse = median_seconds([sys.executable, "-m", "charrnn", "train", "--lr", "-1"])
    torch = median_seconds([sys.executable, "-c", "import torch"])
    print(f"\nrefusing --lr -1: {refuse:.2f} s; import torch: {torch:.2f} s; ratio {refuse / torch:.2f}")


if __name__ == "__main__":
    main()
