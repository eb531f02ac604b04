"""The data path's layers (ARCHITECTURE: data -> model -> embed -> store -> analyses -> figures):
``viz`` only draws, so no module of it reads files, searches or loads models; ``metrics`` are plain
functions on arrays, so they import no layer above them; a command of ``cli`` imports no other
command (shared options live in ``cli/common.py``, ``cli/output.py``, ``cli/training_options.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "embedscope"
ABOVE_VIZ = ("embedscope.analyses", "embedscope.store", "embedscope.data", "embedscope.models",
             "embedscope.embed", "embedscope.saliency", "embedscope.study", "embedscope.train",
             "embedscope.cli", "embedscope.importers")
ABOVE_METRICS = ABOVE_VIZ + ("embedscope.viz",)


def runtime_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path`` that runs (those under ``if TYPE_CHECKING:`` do not)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
    return out


def offending(package: str, banned: tuple[str, ...]) -> list[str]:
    bad = []
    for f in sorted((PKG / package).rglob("*.py")):
        for line, mod in runtime_imports(f):
            if any(mod == b or mod.startswith(b + ".") for b in banned):
                bad.append(f"{f.relative_to(PKG.parent)}:{line} imports {mod}")
    return bad


@pytest.mark.parametrize("package,banned", [("viz", ABOVE_VIZ), ("metrics", ABOVE_METRICS)])
def test_layers_import_nothing_above_them(package, banned):
    assert offending(package, banned) == []


def test_the_check_sees_an_import_that_runs(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from embedscope.store import x\n"
                 "def g():\n    from embedscope.analyses import y\n", encoding="utf-8")
    assert runtime_imports(f) == [(1, "typing"), (5, "embedscope.analyses")]


CLI_SHARED = {"embedscope.cli", "embedscope.cli.common", "embedscope.cli.output", "embedscope.cli.training_options"}


def test_no_command_imports_another():
    bad = []
    for f in sorted((PKG / "cli").glob("*.py")):
        own = f"embedscope.cli.{f.stem}"
        for line, mod in runtime_imports(f):
            if mod.startswith("embedscope.cli") and mod not in CLI_SHARED and mod != own:
                bad.append(f"{f.name}:{line} imports {mod}")
    assert bad == []
