"""The core stays free of Qt: only app/ui imports PySide6 (qutebrowser-style import check)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

APP = ROOT / "app"
QT_MODULES = ("PySide6", "shiboken6", "PyQt5", "PyQt6", "PySide2")
# The one allowed exception: `doctor` imports QtCore inside a function to report the Qt runtime.
ALLOWED_LAZY = {("doctor.py", "PySide6")}


def _imports(tree: ast.AST):
    """(module name, is inside a function) for every import statement."""
    def walk(node, in_func):
        for child in ast.iter_child_nodes(node):
            inner = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, inner
            elif isinstance(child, ast.ImportFrom) and child.module:
                yield child.module, inner
            yield from walk(child, inner)
    yield from walk(tree, False)


def core_files() -> list[Path]:
    return [p for p in APP.rglob("*.py") if "ui" not in p.relative_to(APP).parts]


def test_core_modules_do_not_import_qt():
    offenders = []
    for path in core_files():
        rel = path.relative_to(APP).as_posix()
        for module, lazy in _imports(ast.parse(path.read_text(), str(path))):
            top = module.split(".")[0]
            if top in QT_MODULES and not (lazy and (rel, top) in ALLOWED_LAZY):
                offenders.append(f"app/{rel} imports {module}")
            if module.startswith("app.ui") and not lazy:
                offenders.append(f"app/{rel} imports {module} at module level")
    assert not offenders, "\n".join(offenders)


def test_importing_the_core_loads_no_qt():
    modules = sorted("app." + p.relative_to(APP).with_suffix("").as_posix().replace("/", ".")
                     for p in core_files() if p.name not in ("__main__.py", "__init__.py"))
    code = ("import sys\n" + "".join(f"import {m}\n" for m in modules) +
            f"qt = [m for m in sys.modules if m.split('.')[0] in {QT_MODULES!r}]\nprint(qt)\nassert not qt\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(modules) >= 5


def test_llama_cpp_is_reached_only_through_llama_backend():
    """With ggml's backends as loadable modules, llama.cpp must not be used before
    app.llama_backend.llama() has loaded them: nothing else imports llama_cpp."""
    offenders = []
    for path in list(APP.rglob("*.py")) + list((ROOT / "tests").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "app/llama_backend.py":
            continue
        for module, _lazy in _imports(ast.parse(path.read_text(), str(path))):
            if module.split(".")[0] == "llama_cpp":
                offenders.append(f"{rel} imports {module}")
        if "from llama_cpp import" in path.read_text() and rel != "tests/test_layering.py":
            offenders.append(f"{rel} imports from llama_cpp in generated code")
    assert not offenders, "\n".join(offenders)
