"""The package's floors (docs/how-it-works.md): every module imports only the floors below its own, and of
the floors side by side only training reaches generation, and data the shipped model."""

import ast
from pathlib import Path

import charrnn

PACKAGE = Path(charrnn.__file__).parent
FLOORS = {"config": 0, "errors": 0, "utils": 0, "__init__": 0, "models": 1, "data": 1, "generation": 2,
          "training": 2, "analysis": 3, "api": 4, "cli": 5, "__main__": 6}
# Training records samples and loads models through generation; the data directories refuse the shipped
# model's folder (models.pretrained).
SIDEWAYS = {("training", "generation"), ("data", "models")}


def floor(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
    return [name for name in found if name.startswith("charrnn.")]


def test_no_module_imports_upward_or_sideways():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = floor(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        for name in imports(path):
            there = floor(name)
            upward = FLOORS[there] > FLOORS[here]
            sideways = there != here and FLOORS[there] == FLOORS[here] > 0 and (here, there) not in SIDEWAYS
            if upward or sideways:
                wrong.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    assert wrong == []


def test_every_floor_is_known():
    assert {floor(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
            for path in PACKAGE.rglob("*.py")} == set(FLOORS)
