"""`python -m app`: the command line (app/cli), the window when no command is given."""

import sys

from app.cli import main

sys.exit(main())
