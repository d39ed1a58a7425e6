"""The exit codes of `python -m app`: one enum for every command and the headless server. No Qt.

It lives on the ground floor because commands run on several floors (the headless server in
`app.serve`, `mcp` in `app.chat`, the self-test in `app.ui`), and each returns one of these.
`patch` and `hub` give some codes their own meaning (`PatchExit`, `HubExit` in app/cli/common.py).
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # the command ran and failed: a step, a load, every trial; or the model does not fit
    BAD_INPUT = 2  # usage error, a file or name that is not what it should be
    TIMED_OUT = 3  # mcp: a server or a tool call did not answer in time
    CANCELLED = 130  # Ctrl-C
