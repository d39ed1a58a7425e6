"""The app's log: `logging` into the logs folder, rotated, so a crash or a failed job leaves a trace.

`setup_logging()` is called once by the window and the command line; core modules only call
`logging.getLogger(__name__)`. Files rotate at 2 MB, five kept (`clover-launcher.log`, `.1`, ...).
"""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path

from app import APP_ID
from app.base.paths import app_dirs

MAX_BYTES = 2 << 20
BACKUPS = 5
_FORMAT = "%(asctime)s %(levelname)-7s %(threadName)s %(name)s: %(message)s"


def log_file() -> Path:
    return app_dirs().logs / f"{APP_ID}.log"


def setup_logging(level: int = logging.INFO) -> Path:
    """Log to the rotating file (once per process; a second call only changes nothing). Its path."""
    path = log_file()
    root = logging.getLogger()
    for h in root.handlers:
        if isinstance(h, logging.handlers.RotatingFileHandler) and Path(h.baseFilename) == path:
            return path
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT))
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > level:
        root.setLevel(level)
    return path
