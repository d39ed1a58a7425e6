"""The one-click set-up through the real window: SmolLM2 served locally, ending in "ready" and a chat."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from tests.helpers.http_server import ServerState, serve


@pytest.mark.slow
def test_one_click_setup_of_smollm2_ends_ready_and_loads(qtbot, make_window, smollm2, artifacts_dir):
    window = make_window(allow_http=True)
    qtbot.mouseClick(window.rail.buttons["models"], Qt.MouseButton.LeftButton)  # Models, then its Set up tab
    tabs = window.models_view.tabs
    at = tabs.tabRect(window.models_view.names.index("setup")).center()
    qtbot.mouseClick(tabs, Qt.MouseButton.LeftButton, pos=at)
    view = window.setup_view
    assert window.current_page() == "setup"
    view.select("smollm2-135m")
    with serve(ServerState(files={"/s.gguf": smollm2}, bytes_per_second=60_000_000)) as base:
        view.url.setText(base + "/s.gguf")
        with qtbot.waitSignal(window.model.loaded, timeout=180_000):
            with qtbot.waitSignal(view.ready, timeout=120_000) as ready:
                qtbot.mouseClick(view.start_button, Qt.MouseButton.LeftButton)
                qtbot.waitUntil(lambda: 0 < view.bars["download"].value() < 1000, timeout=30_000)
                assert view.cancel_button.isEnabled() and not view.start_button.isEnabled()
    assert ready.args[0].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    for step, bar in view.bars.items():
        assert bar.value() == 1000, step
    assert "matches (catalog)" in view.status["verify"].text()
    assert view.status["ready"].text().startswith("ready:")
    view.grab().save(str(artifacts_dir / "setup_view.png"))
    assert window.current_page() == "chat"
    assert window.model_bar.label.text().startswith("SmolLM2-135M-Instruct.Q4_1 ·")  # the file, not general.name


def test_failure_shows_the_error_and_offers_retry(qtbot, make_window, tmp_path):
    window = make_window(allow_http=True)
    window.show_setup()
    view = window.setup_view
    view.select("smollm2-135m")
    with serve(ServerState(files={})) as base:
        view.url.setText(base + "/missing.gguf")
        with qtbot.waitSignal(view.failed, timeout=60_000) as failed:
            view.start()
    assert "404" in failed.args[0]
    assert view.error.isVisible() and view.start_button.text() == "Retry" and view.start_button.isEnabled()


def test_a_short_window_scrolls_the_page_and_shows_the_error(qtbot, make_window):
    """Nothing is squeezed: the model list keeps three rows, and the page scrolls to the error."""
    window = make_window(allow_http=True)
    window.resize(1000, 560)
    window.show_setup()
    view = window.setup_view
    view.select("smollm2-135m")
    with serve(ServerState(files={})) as base:
        view.url.setText(base + "/missing.gguf")
        with qtbot.waitSignal(view.failed, timeout=60_000):
            view.start()
    viewport = view.scroll_area.viewport()
    qtbot.waitUntil(lambda: view.error.visibleRegion().boundingRect().height() == view.error.height())
    assert view.scroll_area.verticalScrollBar().maximum() > 0  # the page is taller than the window here
    assert view.models.height() >= 3 * view.models.sizeHintForRow(0)
    top = view.error.mapTo(viewport, view.error.rect().topLeft()).y()
    assert 0 <= top and top + view.error.height() <= viewport.height()


def test_cancel_stops_the_download(qtbot, make_window, smollm2):
    window = make_window(allow_http=True)
    view = window.setup_view
    view.select("smollm2-135m")
    with serve(ServerState(files={"/s.gguf": smollm2}, bytes_per_second=5_000_000)) as base:
        view.url.setText(base + "/s.gguf")
        with qtbot.waitSignal(view.failed, timeout=60_000) as failed:
            view.start()
            qtbot.waitUntil(lambda: view.bars["download"].value() > 0, timeout=30_000)
            view.cancel()
    assert "cancelled" in failed.args[0]


def test_add_a_local_clover_file_and_set_it_up(qtbot, make_window, tmp_path):
    """A local file in the vendor dialect: its header, not the catalog, picks the Clover profile (glm4moe
    is no catalog architecture); the fixes are applied at load time (no copy), the preflight loads it
    with them, and so does the chat."""
    from tests.helpers.gguf_models import write_glm4_moe

    window = make_window(allow_http=True)
    view = window.setup_view
    model = write_glm4_moe(tmp_path / "my-clover.gguf", dialect="vendor")
    entry = view.add_local_file(str(model))
    assert view.entry().id == entry.id and entry.local_path == str(model.resolve())
    assert entry.patch_profile is None  # glm4moe is no catalog architecture: nothing to patch with
    url_entry = view.add_url("My Clover", "https://example.com/models/clover-q4.gguf")
    assert url_entry.file_name == "clover-q4.gguf" and view.entry().id == "user-my-clover"
    view.select(entry.id)
    with qtbot.waitSignal(window.model.loaded, timeout=120_000):
        with qtbot.waitSignal(view.ready, timeout=60_000) as ready:
            view.start()
    assert ready.args[0] == str(model.resolve()) and "clover dialect" in view.status["plan"].text()
    assert "Clover patch applied at load (3 fixes): no copy" in view.status["patch"].text()
    assert "tokens and every tensor" in view.status["preflight"].text()
    assert not list(tmp_path.glob("*.patched.gguf")) and not list((tmp_path / "clover-home").rglob("*.patched.gguf"))
    assert "Clover patch applied at load (3 fixes)" in window.model_bar.label.text()


def test_offline_the_set_up_says_one_sentence_never_an_errno(qtbot, make_window, monkeypatch):
    """Issue 53, item 2: the Hub's host does not resolve. The plan and the set-up both say NO_HUB; the
    errno is behind "Details"."""
    from app.fetch.no_connection import NO_HUB

    monkeypatch.setenv("HF_ENDPOINT", "http://clover-no-such-host.invalid")
    window = make_window(allow_http=True)
    window.show_setup()
    view = window.setup_view
    view.select("smollm2-135m")  # a Hub file: its header is read from the Hub to plan it
    qtbot.waitUntil(lambda: view.plan_text.sentence == NO_HUB, timeout=30_000)
    assert "Errno" not in view.plan_text.text() and "Errno" in view.plan_text.details
    with qtbot.waitSignal(view.failed, timeout=60_000):
        view.start()
    assert view.error.isVisible() and view.error.sentence == NO_HUB and "Errno" not in view.error.text()
    view.error.toggle_details()
    assert "clover-no-such-host.invalid" in view.error.text()
