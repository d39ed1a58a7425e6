"""llama.cpp's C++ calls stay inside its own libraries (issue 37: every load died on a lent H200).

There, every model load died with SIGSEGV in `llama_model::print_info`, at its first
`std::stringstream << int`. That call is bound at run time by name, first in the process's global
scope, and a library that exports its own static copy of libstdc++ (loaded with RTLD_GLOBAL, by
LD_PRELOAD, or the host program itself) takes it; its locale facets do not match the stream's
(ggml-org/llama.cpp#22434 has that trace). The set-up now links libstdc++ into each library with its
symbols hidden (packaging/llama_cpp_extras.cmake), so no other copy can take those calls.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.machine.llama_backend import lib_dir
from tests.helpers.app_process import ROOT

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="ELF symbol binding: Linux only")


def _libraries() -> list[Path]:
    return sorted(p for p in lib_dir().iterdir() if ".so" in p.name and not p.name.startswith("libcudart"))


def test_no_library_of_llama_cpp_needs_the_systems_libstdcxx():
    readelf = shutil.which("readelf") or pytest.skip("readelf (binutils) is not installed")
    for lib in _libraries():
        dyn = subprocess.run([readelf, "--dyn-syms", "-d", "-W", str(lib)], capture_output=True, text=True).stdout
        assert "libstdc++.so" not in dyn, f"{lib.name} needs the system's libstdc++"
        imported = [line for line in dyn.splitlines() if " UND " in line and re.search(r"@(GLIBCXX|CXXABI)_", line)]
        assert not imported, f"{lib.name} imports {len(imported)} libstdc++ symbols, e.g. {imported[0].split()[-1]}"


POISON = textwrap.dedent("""
    #include <sstream>
    #include <string>
    // a library with its own copy of libstdc++, every symbol of it exported (no --exclude-libs)
    extern "C" int poison(int x) { std::stringstream ss; ss << x; return (int) ss.str().size(); }
""")

LOAD = textwrap.dedent("""
    import ctypes, os, sys
    ctypes.CDLL(sys.argv[1], mode=os.RTLD_GLOBAL)  # the foreign copy first, in the global scope
    from app.machine.cpu_probe import write_probe_model
    from app.machine.llama_backend import llama
    from pathlib import Path
    model = Path(sys.argv[2])
    write_probe_model(model)
    lc = llama()
    params = lc.llama_model_default_params()
    params.n_gpu_layers = 0
    m = lc.llama_model_load_from_file(str(model).encode(), params)  # print_info: stringstream << int
    print("loaded" if m else "not loaded")
""")


def test_a_foreign_libstdcxx_in_the_global_scope_takes_none_of_llamas_calls(tmp_path):
    gxx = shutil.which("g++") or pytest.skip("no g++ to build a library with its own libstdc++")
    poison = tmp_path / "libpoison.so"
    src = tmp_path / "poison.cpp"
    src.write_text(POISON)
    subprocess.run([gxx, "-shared", "-fPIC", "-static-libstdc++", "-o", str(poison), str(src)], check=True)
    trace = tmp_path / "bindings"
    done = subprocess.run([sys.executable, "-c", LOAD, str(poison), str(tmp_path / "probe.gguf")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LD_DEBUG": "bindings", "LD_DEBUG_OUTPUT": str(trace)})
    assert done.returncode == 0 and "loaded" in done.stdout, done.stderr[-2000:]
    lines = "".join(p.read_text(errors="replace") for p in tmp_path.glob("bindings.*"))
    ours = "|".join(re.escape(p.name) for p in _libraries())
    taken = re.findall(rf"binding file \S*/({ours}) \[\d+\] to \S*libpoison\.so \[\d+\]: normal symbol `([^']+)'",
                       lines)
    assert "libpoison.so" in lines  # the trace saw the foreign copy
    assert not taken, f"{len(taken)} calls of llama.cpp bound to the foreign libstdc++, e.g. {taken[:3]}"
