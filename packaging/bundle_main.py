"""The bundle's entry point: the same command line as `python -m app` (no argument: the window);
`--cpu-probe MODULE MODEL` is the CPU variant probe's child (app/machine/cpu_probe_child.py), `--engine-host`
the window's engine process (app/engine/host.py, started by app/engine/hosted.py)."""

import sys

if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--cpu-probe":
        from app.machine.cpu_probe_child import main as probe_main

        sys.exit(probe_main(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 2 and sys.argv[1] == "--engine-host":
        from app.engine.host import main as host_main

        sys.exit(host_main())
    from app.cli import main

    sys.exit(main())
