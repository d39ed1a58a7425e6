"""The prompt cache's files on disk as the settings see them: where they live, how much they hold, and
clearing them. Apart from app/engine/prompt_cache.py so the window's Settings page can say the size
without importing numpy and llama.cpp at start."""

from __future__ import annotations

from pathlib import Path

SUFFIX = ".pcache"


def prompt_cache_folder() -> Path:
    """The disk tier's folder, in the data folder (one subfolder per identity)."""
    from app.base.paths import app_dirs

    return app_dirs().data / "prompt-cache"


def folder_size(folder: Path) -> tuple[int, int]:
    """(entries, bytes) of every prompt cache file under `folder` (all models)."""
    n = size = 0
    for p in folder.rglob(f"*{SUFFIX}") if folder.is_dir() else ():
        try:
            size += p.stat().st_size
            n += 1
        except OSError:
            pass
    return n, size


def clear_folder(folder: Path) -> int:
    """Remove every prompt cache file under `folder`; the bytes freed."""
    freed = 0
    for p in folder.rglob(f"*{SUFFIX}*") if folder.is_dir() else ():
        try:
            size = p.stat().st_size
            p.unlink()
            freed += size
        except OSError:
            pass
    return freed
