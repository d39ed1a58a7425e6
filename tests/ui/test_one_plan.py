"""One plan travels end to end (issue 27, item 2): a "Download and set up" click on the Hub page
hands the page's plan to the set-up, which reads no header over the network again and plans
nothing again; the one plan after the click is the load's, of the file on disk."""

from __future__ import annotations

import pytest

from app.fetch import hub
from app.model import patch, plan
from app.model.plan import AUTO_SLOTS
from app.net import remote_gguf
from tests.helpers.fake_hub import FakeRepo, HubState, fake_hub
from tests.helpers.gguf_models import write_deepseek_moe


class Counts:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.plans = self.header_reads = self.dialect_matches = 0

        def counted(module, name, field):
            real = getattr(module, name)

            def wrapper(*args, **kwargs):
                setattr(self, field, getattr(self, field) + 1)
                return real(*args, **kwargs)

            monkeypatch.setattr(module, name, wrapper)
            return wrapper

        make_plan = counted(plan, "make_plan", "plans")
        for module in ("app.fetch.setup_pipeline", "app.ui.views.setup_view"):  # imported by name there
            import importlib

            mod = importlib.import_module(module)
            if hasattr(mod, "make_plan"):
                monkeypatch.setattr(mod, "make_plan", make_plan)
        counted(remote_gguf, "_read_header", "header_reads")  # every header read over HTTP goes through it
        counted(patch, "matching_profile", "dialect_matches")

    def take(self) -> tuple[int, int, int]:
        now = (self.plans, self.header_reads, self.dialect_matches)
        self.plans = self.header_reads = self.dialect_matches = 0
        return now


def test_a_hub_set_up_click_makes_one_plan_and_reads_no_header_again(qtbot, make_window, tmp_path, monkeypatch):
    model = write_deepseek_moe(tmp_path / "tiny-moe-Q8_0.gguf")
    state = HubState()
    state.add(FakeRepo("clover-lab/tiny-moe-GGUF", {"tiny-moe-Q8_0.gguf": model}))
    with fake_hub(state) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        hub.CACHE._mem.clear()
        counts = Counts(monkeypatch)
        window = make_window()
        view = window.hub_view
        window.navigate("hub")
        op = window.setup_view.preview_op  # the set-up page's preview of its own selection, not counted
        qtbot.waitUntil(lambda: op is None or not op.running, timeout=30_000)
        counts.take()
        with qtbot.waitSignal(view.planned, timeout=60_000):
            view.open_repo("clover-lab/tiny-moe-GGUF")
        assert counts.take() == (1, 1, 1)  # the page: one header read, one plan, one dialect match
        with qtbot.waitSignal(window.model.loaded, timeout=120_000):
            view.setup_selected()
        after = counts.take()
        print(f"after the click: {after[0]} plan(s), {after[1]} header read(s) over the network, "
              f"{after[2]} dialect match(es)")
        # the load's plan of the file on disk (and its load-time patch check): with automatic slots (the
        # window's default) it weighs one slot against up to AUTO_SLOTS, a plan each; no header is read again
        assert 1 <= after[0] <= 1 + AUTO_SLOTS and after[1:] == (0, 1)
        assert "matches (catalog)" in window.setup_view.status["verify"].text()  # the Hub's SHA-256, verified
        window.close()
