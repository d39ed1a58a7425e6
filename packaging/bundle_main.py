"""The bundle's entry point: the same command line as `python -m app` (no argument: the window);
`--cpu-probe MODULE MODEL` is the CPU variant probe's child (app/machine/cpu_probe.py)."""

import sys

if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--cpu-probe":
        from app.machine.cpu_probe import _child

        sys.exit(_child(sys.argv[2], sys.argv[3]))
    from app.cli import main

    sys.exit(main())
