"""A bench's figures written into docs/benchmarks.md, so the tables there come from a run, not from a
hand. The page holds one marked block per bench:

    <!-- bench:engine_speed -->
    ...the table the last `--docs` run wrote...
    <!-- /bench:engine_speed -->

A bench that was given `--docs` (`add_docs_flag`) calls `write_verdicts(name, verdicts, args)` after
its run: the block's text is replaced by the figures it just printed (`Verdicts.rows`), the date, the
machine and the command. A page without the block is refused (`MissingBlock`): a bench never adds a
section by itself.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import sys
from pathlib import Path

from tests.bench.verdict import Verdicts

PAGE = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


class MissingBlock(ValueError):
    """The page has no block of that name (or its end marker is missing or comes first)."""


def markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"


def replace_block(text: str, name: str, body: str) -> str:
    """`text` with the block `name` holding `body` (between its markers, on lines of their own)."""
    start, end = markers(name)
    if text.count(start) != 1 or text.count(end) != 1:
        raise MissingBlock(f"no single block {start} ... {end} in the page")
    head, rest = text.split(start, 1)
    if end not in rest:
        raise MissingBlock(f"{end} comes before {start}")
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body.strip()}\n{end}{tail}"


def machine() -> str:
    """The CPU's model name and its cores, as a table's caption says where it was measured."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def verdicts_table(verdicts: Verdicts, command: str, *, when: datetime.date | None = None,
                   where: str | None = None) -> str:
    """The figures a bench checked, as a Markdown table with the run's date, machine and command."""
    day = (when or datetime.datetime.now(datetime.UTC).date()).isoformat()
    lines = [f"Written by `{command}` on {day} ({where or machine()}).", "",
             "| figure | measured | target | verdict |", "| --- | ---: | --- | --- |"]
    for figure, value, target, met in verdicts.rows:
        lines.append(f"| {figure.replace('|', '/')} | {value} | {target.replace('|', '/')} | "
                     f"{'PASS' if met else 'MISS'} |")
    return "\n".join(lines)


def write_block(name: str, body: str, page: Path = PAGE) -> None:
    """Replace the block `name` in `page` (docs/benchmarks.md) with `body`."""
    page.write_text(replace_block(page.read_text(), name, body))


def add_docs_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--docs", action="store_true",
                        help="write this run's figures into their table in docs/benchmarks.md")


def write_verdicts(name: str, verdicts: Verdicts, args: argparse.Namespace, page: Path = PAGE) -> None:
    """With `--docs`: the run's figures into block `name` of the page, and a line saying so."""
    if not getattr(args, "docs", False):
        return
    command = "python -m tests.bench." + name + "".join(f" {shlex.quote(a)}" for a in sys.argv[1:])
    write_block(name, verdicts_table(verdicts, command), page)
    print(f"figures written to {page} (block {name})", flush=True)
