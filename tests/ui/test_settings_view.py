"""Issue 53, item 8: Settings is one page (appearance, chat defaults, engine, server, folders, privacy);
the chat's side panel keeps what changes per conversation (system prompt, sampling, presets). Both
forms come from the same declarations, each setting in one of them."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QSpinBox

from app.base.settings import BY_KEY, OPTIONS, Settings
from app.ui.base import theme
from app.ui.widgets.settings_panel import CHAT_SECTIONS, PAGE_SECTIONS, SHOWN


def test_the_page_has_every_section_and_the_side_panel_only_the_conversations_settings(qtbot, make_window):
    w = make_window()
    qtbot.mouseClick(w.rail.buttons["settings"], Qt.MouseButton.LeftButton)
    page, side = w.settings_form, w.settings_panel
    assert w.current_page() == "settings" and page.isVisible() and w.settings_view.isAncestorOf(page)
    assert list(page.sections) == ["Appearance", "Chat defaults", "Engine", "Server", "Folders", "Privacy"]
    assert list(side.sections) == ["System prompt and sampling"] and not w.settings_view.isAncestorOf(side)
    assert set(side.widgets) == {"chat.system_prompt", "sampling.temperature", "sampling.top_p", "sampling.max_tokens"}
    assert side.presets.combo.count() > 1  # the presets, with the fields they fill
    shown = [k for _t, keys in (*CHAT_SECTIONS, *PAGE_SECTIONS) for k in keys]
    assert len(shown) == len(set(shown)) == len(SHOWN)  # each setting in one place
    # every setting a user sets is on one of them (the composer has thinking and its budget; the
    # tune page its goal)
    elsewhere = {"chat.thinking", "chat.thinking_budget", "engine.tune_goal"}
    assert {o.key for o in OPTIONS if not o.hidden} - elsewhere == set(shown)
    for key in page.widgets:
        assert page.hints[key].isVisible() and page.hints[key].text(), key
    for key in ("folder.models", "folder.data", "folder.config", "log"):
        assert page.folder_buttons[key].isVisible()
    assert page.privacy.text().startswith("Conversations, settings and the local server's request list stay")

    qtbot.mouseClick(w.rail.buttons["chat"], Qt.MouseButton.LeftButton)
    w.composer.settings_button.setChecked(True)  # the side panel: the conversation's settings
    assert side.isVisible() and not page.isVisible() and w.side_tabs.tabText(0) == "Chat settings"
    qtbot.mouseClick(w.rail.buttons["settings"], Qt.MouseButton.LeftButton)
    assert page.isVisible()  # the page has its own form: nothing is taken from the side panel
    assert w.side_tabs.widget(0).isAncestorOf(side)


def test_a_change_on_either_is_saved_and_takes_effect(qtbot, make_window, clover_home):
    w = make_window()
    w.navigate("settings")
    page, side = w.settings_form, w.settings_panel
    theme_box = page.widgets["ui.theme"]
    assert isinstance(theme_box, QComboBox)
    theme_box.setCurrentIndex(theme_box.findData("dark"))
    assert theme.current == "dark"
    scale = page.widgets["ui.font_scale"]
    assert isinstance(scale, QDoubleSpinBox)
    scale.setValue(1.2)
    assert theme.font_scale() == 1.2
    threads = page.widgets["engine.threads"]
    assert isinstance(threads, QSpinBox) and threads.specialValueText() == "automatic"
    threads.setValue(3)
    temperature = side.widgets["sampling.temperature"]
    assert isinstance(temperature, QDoubleSpinBox)
    temperature.setValue(0.35)
    saved = Settings.load()
    assert (saved.get("ui.theme"), saved.get("ui.font_scale"), saved.get("engine.threads"),
            saved.get("sampling.temperature")) == ("dark", 1.2, 3, 0.35)
    assert side.presets.combo.currentText() == "Custom"  # no preset has these fields
    w.set_font_scale(1.0)  # Ctrl+0 while the page is hidden: the page shows it when shown again
    w.navigate("chat")
    w.navigate("settings")
    assert scale.value() == 1.0
    theme_box.setCurrentIndex(theme_box.findData("light"))
    assert BY_KEY["ui.theme"].default == "system"
