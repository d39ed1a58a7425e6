"""The architecture, checked: the core stays free of Qt (only app/ui imports PySide6, a
qutebrowser-style import check), and every import points down the floors that app/'s subpackages are."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

APP = ROOT / "app"
QT_MODULES = ("PySide6", "shiboken6", "PyQt5", "PyQt6", "PySide2")
# The one allowed exception: `doctor` imports QtCore inside a function to report the Qt runtime.
ALLOWED_LAZY = {("machine/doctor.py", "PySide6")}


# Bottom to top. A module may import its own floor and those below, never one above: the package
# `app` itself (names and version) is the ground, the command line (`cli`, `__main__`) the roof. The
# floors are named, not numbered, the same way in each package's docstring ("The `engine` floor: ...")
# and in docs/architecture/overview.md. (No import circle at all: tests/test_front_door.py.)
FLOORS = ("app", "app.base", "app.gguf", "app.net", "app.machine", "app.model", "app.fetch", "app.engine",
          "app.chat", "app.serve", "app.bench", "app.ui.base", "app.ui.widgets", "app.ui.controllers", "app.ui.views",
          "app.ui", "app.cli", "app.__main__")


def _imports(tree: ast.AST, *, names: bool = False):
    """(module name, is inside a function) for every import statement; with names, also every
    `from app import x` as `app.x` (x may be a module)."""
    def walk(node, in_func):
        for child in ast.iter_child_nodes(node):
            inner = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, inner
            elif isinstance(child, ast.ImportFrom) and child.module:
                yield child.module, inner
                if names:
                    for alias in child.names:
                        yield f"{child.module}.{alias.name}", inner
            yield from walk(child, inner)
    yield from walk(tree, False)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def floor(module: str) -> int | None:
    """The floor of an app module: the longest FLOORS entry it is, or sits in."""
    best = None
    for i, f in enumerate(FLOORS):
        if (module == f or module.startswith(f + ".")) and (best is None or len(f) > len(FLOORS[best])):
            best = i
    return best


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
    app.machine.llama_backend.llama() has loaded them: nothing else imports llama_cpp."""
    offenders = []
    for path in list(APP.rglob("*.py")) + list((ROOT / "tests").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "app/machine/llama_backend.py":
            continue
        for module, _lazy in _imports(ast.parse(path.read_text(), str(path))):
            if module.split(".")[0] == "llama_cpp":
                offenders.append(f"{rel} imports {module}")
        if "from llama_cpp import" in path.read_text() and rel != "tests/test_layering.py":
            offenders.append(f"{rel} imports from llama_cpp in generated code")
    assert not offenders, "\n".join(offenders)


def test_app_is_floors_only():
    """Every module sits in a floor's package; nothing is left loose at the top of app/ but the
    package itself and the command line."""
    loose = [p.name for p in APP.glob("*.py") if p.stem not in ("__init__", "__main__", "cli")]
    assert not loose, f"modules outside a floor: {loose}"
    for f in FLOORS[1:-2]:
        assert (ROOT / f.replace(".", "/") / "__init__.py").read_text().startswith('"""'), f"{f} says what it is"


def test_imports_only_point_down():
    """Any import, also inside a function or under TYPE_CHECKING: a lower floor, or the same one."""
    upward, seen = [], 0
    for path in APP.rglob("*.py"):
        me = module_name(path)
        mine = floor(me)
        assert mine is not None, me
        for target, _lazy in _imports(ast.parse(path.read_text(), str(path)), names=True):
            if target.split(".")[0] != "app":
                continue
            theirs = floor(target)
            rest = target[len("app."):]
            if target == "app" or ("." not in rest and not (APP / rest).is_dir() and not (APP / f"{rest}.py").exists()):
                continue  # a name from the package itself (APP_ID, __version__)
            seen += 1
            if theirs > mine:
                upward.append(f"{me} ({FLOORS[mine]}) imports {target} ({FLOORS[theirs]})")
    assert seen > 100
    assert not upward, "\n".join(upward)


def test_the_floors_are_named_the_same_way_in_the_packages_and_the_architecture_page():
    overview = (ROOT / "docs" / "architecture" / "overview.md").read_text()
    floors = [f.split(".")[1] for f in FLOORS if f.count(".") == 1 and f != "app.__main__"]  # base ... ui, cli
    assert floors[0] == "base" and floors[-1] == "cli"
    at = [overview.find(f"- **{name}**: `app/{name}/`") for name in floors]
    assert -1 not in at, [n for n, i in zip(floors, at, strict=True) if i < 0]
    assert at == sorted(at), "docs/architecture/overview.md lists the floors in another order than FLOORS"
    ui = overview[at[floors.index("ui")]:at[floors.index("cli")]]
    inner = [ui.find(f"`{f.split('.')[2]}/`") for f in FLOORS if f.startswith("app.ui.")]
    assert -1 not in inner and inner == sorted(inner), "the ui floor's own floors, in FLOORS' order"
    for name in floors:
        doc = ast.get_docstring(ast.parse((APP / name / "__init__.py").read_text())) or ""
        assert doc.startswith(f"The `{name}` floor"), f"app/{name}/__init__.py: {doc[:60]!r}"
        assert not re.search(r"\bFloor \d+", doc), f"app/{name}/__init__.py numbers its floor"
