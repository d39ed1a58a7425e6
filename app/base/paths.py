"""Where the launcher keeps its files: platformdirs folders, overridable for tests and portable use.

`CLOVER_HOME=/some/dir` puts data, cache and config under that one folder (tests use it so that
they never touch the user's real folders).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from app import APP_ID

RESOURCES = Path(__file__).resolve().parents[2] / "resources"


@dataclass(frozen=True)
class AppDirs:
    data: Path  # conversations, settings database, setup state
    models: Path  # downloaded and patched model files (large)
    cache: Path  # rebuildable things: test models, partial downloads
    config: Path  # settings
    logs: Path

    def all(self) -> dict[str, Path]:
        return {"data": self.data, "models": self.models, "cache": self.cache,
                "config": self.config, "logs": self.logs}


def app_dirs() -> AppDirs:
    home = os.environ.get("CLOVER_HOME")
    if home:
        base = Path(home)
        return AppDirs(data=base / "data", models=base / "models", cache=base / "cache",
                       config=base / "config", logs=base / "logs")
    dirs = platformdirs.PlatformDirs(APP_ID, appauthor=False)
    data = Path(dirs.user_data_dir)
    return AppDirs(data=data, models=data / "models", cache=Path(dirs.user_cache_dir),
                   config=Path(dirs.user_config_dir), logs=Path(dirs.user_log_dir))


def resource(*parts: str) -> Path:
    """A file shipped in resources/ (icons, catalog, patch profiles, styles)."""
    path = RESOURCES.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"resource missing from the installation: {path}")
    return path
