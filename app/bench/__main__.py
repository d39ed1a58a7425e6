"""`python -m app.bench NAME`: the benchmarks that ship with the app (today `patch`)."""

import argparse
import sys


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m app.bench", description="Clover Launcher benchmarks")
    sub = parser.add_subparsers(dest="name", required=True, metavar="NAME")
    from app.bench import patch_bench

    patch_bench.add_parser(sub)
    args = parser.parse_args()
    return args.run(args)


sys.exit(main())
