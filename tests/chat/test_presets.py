"""Presets (a system prompt and sampling under a name): the app's from resources/presets.json, the
user's kept in the config folder, replacing one of the app's by name; damaged entries cost only
themselves."""

from __future__ import annotations

import json

import pytest

from app.base.paths import app_dirs
from app.chat import presets
from app.chat.presets import Preset


def test_the_apps_presets_are_listed_and_valid():
    listed = presets.presets()
    names = [p.name for p in listed]
    assert names[:3] == ["Balanced", "Precise", "Reproducible (temperature 0)"] and "Tool testing" in names
    assert not any(p.user for p in listed)
    assert next(p for p in listed if p.name.startswith("Reproducible")).temperature == 0.0


def test_a_saved_preset_is_kept_replaces_the_apps_by_name_and_goes_on_delete():
    presets.save(Preset("Mine", "Be terse.", 0.3, 0.8))
    presets.save(Preset("Precise", "Only facts.", 0.1, 0.9))
    listed = {p.name: p for p in presets.presets()}
    assert listed["Mine"] == Preset("Mine", "Be terse.", 0.3, 0.8, user=True)
    assert listed["Precise"].system_prompt == "Only facts." and listed["Precise"].user
    assert presets.delete("Precise") and not presets.delete("Precise")
    assert {p.name: p for p in presets.presets()}["Precise"].user is False  # the app's is back
    saved = json.loads((app_dirs().config / "presets.json").read_text())
    assert saved == [{"name": "Mine", "system_prompt": "Be terse.", "temperature": 0.3, "top_p": 0.8,
                      "description": ""}]


def test_bad_values_are_refused_and_a_damaged_entry_is_skipped():
    with pytest.raises(ValueError, match="temperature 0 to 2"):
        presets.save(Preset("Hot", "", 3.0, 0.9))
    with pytest.raises(ValueError, match="needs a name"):
        presets.save(Preset("  ", "", 0.5, 0.9))
    path = app_dirs().config / "presets.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([{"name": "ok", "temperature": 0.5, "top_p": 0.9}, {"name": "broken"}]))
    assert [p.name for p in presets.presets() if p.user] == ["ok"]
