"""The main window opens, shows what was found, and is captured as a screenshot for people to look at."""

from __future__ import annotations

from app.machine import gpu
from app.ui.application import configure
from app.ui.main_window import MainWindow
from tests.helpers.fakes import FakeNVML, NVMLError_LibraryNotFound, rtx_4090


def _texts(widget) -> str:
    from PySide6.QtWidgets import QLabel

    return "\n".join(label.text() for label in widget.findChildren(QLabel))


def test_main_window_opens_and_screenshot(qtbot, qapp, artifacts_dir):
    configure(qapp)
    window = MainWindow(gpus=gpu.probe_with(FakeNVML([rtx_4090()])))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    assert window.windowTitle() == "Clover Launcher"
    qtbot.waitUntil(lambda: "RTX 4090: 24.0 GiB" in _texts(window))  # the machine's facts follow the first frame
    text = _texts(window)
    assert "NVIDIA GeForce RTX 4090: 24.0 GiB, 23.6 GiB free" in text
    assert "llama.cpp from llama-cpp-python 0.3.36." in text
    assert "RTX 4090" in window.status.status_label.text()

    shot = window.grab()
    assert not shot.isNull() and shot.width() >= 780  # the offscreen screen is 800 px wide: the window fits it
    path = artifacts_dir / "main_window.png"
    assert shot.save(str(path))
    assert path.stat().st_size > 5000


def test_main_window_without_gpu_says_cpu_mode(qtbot, qapp):
    window = MainWindow(gpus=gpu.probe_with(FakeNVML(init_error=NVMLError_LibraryNotFound("not found"))))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: "No NVIDIA GPU: models run on the CPU" in _texts(window))
    assert "CPU mode" in window.status.status_label.text()


def test_the_load_first_banner_goes_when_a_model_loads(qtbot, make_window):
    from tests.ui.page_walk import canned_engine

    engine = canned_engine()
    window = make_window(engine=engine)
    window.composer.input.setPlainText("hello")
    window.chat.send()
    assert window.error_banner.isVisible() and window.error_banner.text().startswith(
        "Load a model first: pick one at the top of the chat, or find one in Models")
    assert "…." not in window.error_banner.text()
    from app.machine.llama_load import LoadSettings

    window.model._on_loaded(engine.load("/models/m.gguf", LoadSettings()))
    assert not window.error_banner.isVisible()
    assert "NVML" not in window.model_bar.label.text() and "NVML" not in window.status.status_label.text()


def test_the_live_readout_counts_tokens_not_events_and_send_follows_the_state(qtbot, make_window):
    """A local engine polls its stop flag once between tokens: 60 tokens streamed as 6 events read as
    60 tokens while the reply is written; Send is off while it writes and back on after."""
    import time

    from app.engine.contract import Reply, ReplyStats
    from app.machine.llama_load import LoadSettings
    from tests.helpers.fakes import ScriptedEngine

    class LocalDouble(ScriptedEngine):
        """Its own generate(): it polls the stop flag once per token while streaming one event per ten."""

        kind = "local"

        def generate(self, request, on_event=None, should_stop=None, on_logprob=None) -> Reply:
            for i in range(60):
                if i % 10 == 0:
                    on_event("answer", "ten tokens ")
                time.sleep(0.02)
                if i < 59 and should_stop():  # polled between tokens, not after the last
                    break
            stats = ReplyStats(generated_tokens=60, ttft_seconds=0.02, wall_seconds=1.18, stop_reason="length")
            return Reply("x", "", "x", "", stats)

    engine = LocalDouble()
    window = make_window(engine=engine)
    assert not window.composer.send_button.isEnabled()  # no model yet
    window.model._on_loaded(engine.load("/models/m.gguf", LoadSettings()))
    assert window.composer.send_button.isEnabled() and not window.composer.stop_button.isEnabled()
    readouts: list[str] = []
    window.chat.readout_changed.connect(readouts.append)
    window.composer.input.setPlainText("count")
    with qtbot.waitSignal(window.chat.reply_finished, timeout=30_000):
        window.chat.send()
        assert not window.composer.send_button.isEnabled() and window.composer.stop_button.isEnabled()
    live = [int(t.rsplit(" ", 2)[-2]) for t in readouts[:-1] if t.endswith(" tokens")]
    assert live and max(live) > 6  # more than the events streamed: tokens were counted
    assert readouts[-1].endswith("· 60 tokens")  # the engine's own count at the end
    assert window.composer.send_button.isEnabled() and not window.composer.stop_button.isEnabled()
