"""Remote endpoints and compare mode through the real window."""

from __future__ import annotations

import http.server
import time

import pytest
from PySide6.QtCore import Qt

from app.engine.local import Engine
from app.machine.llama_load import LoadSettings
from app.serve.server import LocalServer
from tests.helpers.gguf_models import write_deepseek_moe
from tests.helpers.http_server import serve_handler


def check(qtbot, view) -> None:
    view.test_connection()
    qtbot.waitUntil(lambda: view.check_label.text()[:1] in "✓✗", timeout=15_000)


class SlowHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        time.sleep(1.5)
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.slow  # waits on a slow server
def test_testing_a_slow_server_does_not_freeze_the_window(qtbot, make_window):
    with serve_handler(SlowHandler) as base:
        w = make_window()
        view = w.engines_view
        view.name.setText("slow")
        view.url.setText(f"{base}/v1")
        start = time.perf_counter()
        view.test_connection()
        assert time.perf_counter() - start < 0.5  # the network call runs off the GUI thread
        assert view.check_label.text().startswith("connecting to") and not view.test_button.isEnabled()
        qtbot.waitUntil(lambda: view.check_label.text().startswith("✗"), timeout=15_000)
        assert view.test_button.isEnabled()
        w.close()


def test_a_saved_endpoint_fills_the_form_after_a_restart(qtbot, make_window):
    w = make_window()
    view = w.engines_view
    view.name.setText("gpu box")
    view.url.setText("http://gpu-box:8080/v1")
    view.save()
    assert view.check_label.text() == "Saved (no API key)."  # no word of a key that was never typed
    w.close()
    again = make_window().engines_view  # a new window: the app started again
    assert again.list.count() == 1 and again.list.currentRow() == 0
    assert (again.name.text(), again.url.text()) == ("gpu box", "http://gpu-box:8080/v1")
    again.remove()
    assert again.list.count() == 0 and again.name.text() == "" and again.check_label.text() == "Removed gpu box."


def test_chat_with_a_remote_endpoint_and_compare_two_models(qtbot, make_window, smollm2, tmp_path, clover_home):
    served_engine = Engine()
    served_engine.load(smollm2, LoadSettings(n_ctx=2048, n_outputs_max=1, n_threads=2))
    server = LocalServer(served_engine, api_key="sk-ui")
    server.start()
    try:
        w = make_window()
        qtbot.mouseClick(w.rail.buttons["models"], Qt.MouseButton.LeftButton)  # Models, then its Engines tab
        tabs = w.models_view.tabs
        at = tabs.tabRect(w.models_view.names.index("engines")).center()
        qtbot.mouseClick(tabs, Qt.MouseButton.LeftButton, pos=at)
        view = w.engines_view
        assert w.current_page() == "engines"
        view.name.setText("local llama.cpp")
        view.url.setText(server.url)
        view.key.setText("sk-ui")
        view.save()
        assert view.list.count() == 1 and view.check_label.text().startswith("Saved; the API key is kept in")
        check(qtbot, view)
        line = view.check_label.text()
        assert line.startswith("✓ connected in") and "SmolLM2-135M-Instruct.Q4_1" in line  # the served id
        view.key.setText("wrong")
        check(qtbot, view)
        assert view.check_label.text().startswith("✗") and "refused the API key" in view.check_label.text()
        view.key.setText("sk-ui")

        with qtbot.waitSignal(w.model.loaded, timeout=30_000):
            qtbot.mouseClick(view.use_button, Qt.MouseButton.LeftButton)
        assert "remote at" in w.model_bar.label.text() and "tok/s from the stream" in w.model_bar.label.text()
        w.settings_panel.widgets["chat.system_prompt"].setPlainText("You are a helpful assistant. Answer briefly.")
        w.settings_panel.widgets["sampling.temperature"].setValue(0.0)
        w.composer.input.setPlainText("What is the capital of France?")
        with qtbot.waitSignal(w.chat.reply_finished, timeout=120_000) as done:
            w.chat.send()
        assert "Paris" in done.args[0].text and done.args[0].stats.wall_tps > 0

        moe = write_deepseek_moe(tmp_path / "moe.gguf")
        view.set_local(0, str(moe))
        view.side_b.setCurrentText("endpoint: local llama.cpp")
        view.prompt.setPlainText("What is the capital of France?")
        with qtbot.waitSignal(view.compared, timeout=180_000) as compared:
            view.run_compare()
        sides = compared.args[0]
        assert [s.kind for s in sides] == ["local", "remote"] and not any(s.error for s in sides)
        assert view.table.item(1, 2).text().endswith("(from the stream)")
        out = tmp_path / "cmp.md"
        view.export(str(out))
        assert "| tokens/s |" in out.read_text() and "## local llama.cpp" in out.read_text()
        w.close()
    finally:
        server.stop()
        served_engine.unload()
