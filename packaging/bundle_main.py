"""The bundle's entry point: the same command line as `python -m app` (no argument: the window)."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main())
