"""The docs' pictures of the BFCL part (not a test): the runs kept in a folder (a real model's, from
`bench bfcl`) compared side by side, and a case opened, at one screen size and theme.

    CLOVER_HOME=DIR python -m tests.ui.bfcl_pictures OUT_DIR --runs RUN.jsonl,RUN.jsonl [--theme dark]
        [--size 1366x768]

The runs are copied into CLOVER_HOME's runs folder; the newest two are ticked (tests/ui/page_walk.py
`_bfcl`), the first failing case with calls (else the first case) is opened.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from tests.ui.page_walk import _bfcl, logical_size, make_window, settle


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--runs", required=True, help="comma-separated kept runs, oldest first")
    parser.add_argument("--theme", default="light", choices=("light", "dark"))
    parser.add_argument("--size", default="1366x768")
    args = parser.parse_args()
    os.environ.setdefault("CLOVER_HOME", tempfile.mkdtemp(prefix="clover-bfcl-pictures-"))
    from app.bench.bfcl_store import runs_folder

    folder = runs_folder()
    folder.mkdir(parents=True, exist_ok=True)
    for i, run in enumerate(args.runs.split(",")):
        target = folder / Path(run).name
        shutil.copy(run, target)
        os.utime(target, (1_800_000_000 + i, 1_800_000_000 + i))  # their order: newest last named
    args.out.mkdir(parents=True, exist_ok=True)
    scale = float(os.environ.get("QT_SCALE_FACTOR", "1"))
    window, _engine = make_window(args.theme)
    window.show()
    width, height = (int(x) for x in args.size.split("x"))
    window.resize(*logical_size(width, height, scale))
    settle(0.3)
    for state in _bfcl(window, [window.model_bar, window.statusBar()]):
        settle(0.3)
        path = args.out / f"{state.name}-{args.theme}-{args.size}-{scale:g}x.png"
        window.grab().save(str(path))
        print(path)
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
