"""doctor's "Reproducible replies" (issue 54, items 3 and 4): the window's setting as saved, and whether
the last load had the layout (the engine's drafting note says "off: reproducible replies" then)."""

from __future__ import annotations

from app.base.settings import Settings
from app.machine.doctor import _reproducible
from app.machine.drafting_note import write_note


def test_doctor_says_the_setting_and_the_last_load():
    first, _, last = _reproducible()
    assert first.startswith("on in the window's settings") and last == "no model loaded yet"
    settings = Settings.load()
    settings.set("engine.reproducible", False)
    settings.save()
    write_note("a.gguf", "off", "off: reproducible replies")
    first, _, last = _reproducible()
    assert first.startswith("off in the window's settings") and last == "last load (a.gguf): on"
    write_note("b.gguf", "auto", "each slot drafts n-grams where they pay")
    assert _reproducible()[2] == "last load (b.gguf): off"
