"""Guards for the Qt binding itself: bugs that would crash the chat under a fast token stream."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_signal_emit_does_not_leak_or_over_release_bools():
    """PySide6 6.12.0's Signal.emit over-releases the bool it returns: after a few hundred emits
    Python 3.11 aborts ("deallocating True or False"). The engine emits one signal per token."""
    code = textwrap.dedent("""
        import sys
        from PySide6.QtCore import QCoreApplication, QObject, Signal
        app = QCoreApplication([])
        class A(QObject):
            s = Signal(str, str)
        a = A()
        a.s.connect(lambda k, t: None)
        before = sys.getrefcount(True)
        for _ in range(20000):
            a.s.emit("answer", "token")
        print(before, sys.getrefcount(True))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    before, after = map(int, r.stdout.split())
    assert abs(after - before) < 10
