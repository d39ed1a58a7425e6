"""Issue 28, item 7: the smaller things a new user trips on, each through the real window."""

from __future__ import annotations

from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QLabel

from app.engine.local import ModelInfo
from app.machine.llama_load import LoadSettings

INSIDE = "Smollm2 135M 8k Lc100K Mix1 Ep2"  # SmolLM2's general.name: a training-run label


def loaded(window, path: str = "/models/SmolLM2-135M-Instruct-Q8_0.gguf", name: str = INSIDE) -> ModelInfo:
    info = ModelInfo(path, name, "llama", 2048, True, True, LoadSettings(n_ctx=2048))
    window.model._on_loaded(info)
    return info


def test_the_model_bar_names_the_file_not_the_name_inside_it(make_window):
    w = make_window()
    loaded(w)
    assert w.model_bar.label.text().startswith("SmolLM2-135M-Instruct-Q8_0 · llama · 2,048-token context")
    assert INSIDE not in w.model_bar.label.text()
    assert f"Named inside the file: {INSIDE}" in w.model_bar.details_text.text()  # still there, in Details


def test_the_server_button_stays_put_and_the_url_is_never_cut(qtbot, make_window):
    w = make_window()
    w.resize(760, 600)
    qtbot.wait(50)
    button = w.status.server_button

    def x() -> int:
        qtbot.wait(30)
        return button.mapTo(w, QPoint(0, 0)).x()

    before = x()
    w.status.readout.setText("1234.5 tok/s · first token 12.34 s · 12345 tokens")
    assert x() == before  # the live speed's text grows: the button does not move
    w.status.readout.setText("9 tok/s")
    assert x() == before
    w.server.toggle()  # no model loaded: the server answers 503
    try:
        assert button.text() == "Stop server" and x() == before
        url = w.server.url
        assert w.status.server_label.text().startswith(f"{url} answers 503")
        shown = QLabel.text(w.status.server_label)  # what the label shows, elided to its width
        assert shown.startswith(url) and w.status.server_label.width() < w.status.server_label.fontMetrics(
        ).horizontalAdvance(w.status.server_label.text()), shown  # narrow: the end is elided, not the port
    finally:
        w.server.toggle()
    assert button.text() == "Start local server" and x() == before
