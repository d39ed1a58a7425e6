"""A bench's targets, checked in one place: each figure is said with its target and PASS or MISS as it
is measured, repeated last in one block, and the bench exits 3 (`MISS_EXIT`) when any missed (issue 39: a regression
is a red command, not a line someone has to read).

    verdicts = Verdicts()
    ...
    print(f"  ours / curl  {r:.2f}  (target >= 0.9)  {verdicts.check('ours / curl', r, r >= 0.9, '>= 0.9')}")
    ...
    return verdicts.finish()
"""

from __future__ import annotations

from dataclasses import dataclass, field

# the exit code of a bench that missed a target: not 1, which Python gives an uncaught exception, so
# that a run of benches (packaging/gpu_check.sh) tells a missed figure from a bench that failed
MISS_EXIT = 3


@dataclass
class Verdicts:
    rows: list[tuple[str, str, str, bool]] = field(default_factory=list)  # (figure, value, target, met)

    def check(self, figure: str, value: float, met: bool, target: str, fmt: str = "{:.3f}") -> str:
        """Record one figure against its target; "PASS" or "MISS" for the line being printed."""
        self.rows.append((figure, fmt.format(value), target, bool(met)))
        return "PASS" if met else "MISS"

    def finish(self) -> int:
        """The figures again, last, and the exit code: 0 when every target was met, 1 otherwise."""
        if not self.rows:
            return 0
        width = max(len(r[0]) for r in self.rows)
        print("\nfigures:")
        for figure, value, target, met in self.rows:
            print(f"  {figure:<{width}}  {value:>9}  (target {target})  {'PASS' if met else 'MISS'}")
        missed = [r[0] for r in self.rows if not r[3]]
        print(f"MISS: {', '.join(missed)}" if missed else "all targets met", flush=True)
        return MISS_EXIT if missed else 0
