"""A bench's targets, checked in one place: each figure is said with its target and PASS or MISS as it
is measured, repeated last in one block, and the bench exits 1 when any missed (issue 39: a regression
is a red command, not a line someone has to read).

    verdicts = Verdicts()
    ...
    print(f"  ours / curl  {r:.2f}  (target >= 0.9)  {verdicts.check('ours / curl', r, r >= 0.9, '>= 0.9')}")
    ...
    return verdicts.finish()
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
        return 1 if missed else 0
