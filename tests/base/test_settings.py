"""Settings declared once, validated, versioned, per model with the catalog's recommended values."""

from __future__ import annotations

import json

import pytest

from app.base.settings import OPTIONS, SCHEMA_VERSION, Settings
from app.fetch.catalog import model_key, recommended_for


def test_defaults_and_validation(tmp_path):
    s = Settings.load(tmp_path / "settings.json")
    assert s.get("sampling.temperature") == 0.7 and s.get("server.port") == 8080 and s.get("ui.theme") == "system"
    with pytest.raises(ValueError, match="between 0.0 and 2.0"):
        s.set("sampling.temperature", 5)
    with pytest.raises(ValueError, match="one of system, light, dark"):
        s.set("ui.theme", "purple")
    with pytest.raises(ValueError, match="whole number"):
        s.set("server.port", 8080.5)
    with pytest.raises(KeyError):
        s.set("no.such.option", 1)
    assert all(o.title for o in OPTIONS) and len({o.key for o in OPTIONS}) == len(OPTIONS)


def test_saved_values_survive_a_restart_and_unknown_keys_are_dropped(tmp_path):
    path = tmp_path / "settings.json"
    s = Settings.load(path)
    s.set("chat.enter_sends", False)
    s.set("sampling.temperature", 0.3, model="smollm2-135m")
    s.save()
    data = json.loads(path.read_text())
    assert data["version"] == SCHEMA_VERSION
    data["values"]["who.knows"] = 1
    data["values"]["server.port"] = "eighty"
    path.write_text(json.dumps(data))
    again = Settings.load(path)
    assert again.get("chat.enter_sends") is False
    assert again.get("sampling.temperature", "smollm2-135m") == 0.3 and again.get("sampling.temperature") == 0.7
    assert again.get("server.port") == 8080
    assert any("who.knows" in n for n in again.notes) and any("server.port" in n for n in again.notes)


def test_version_1_is_upgraded(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "values": {"sampling_temperature": 0.1, "thinking": False}}))
    s = Settings.load(path)
    assert s.get("sampling.temperature") == 0.1 and s.get("chat.thinking") is False and not s.notes


def test_an_unreadable_file_is_kept_aside_and_defaults_used(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text("{not json")
    s = Settings.load(path)
    assert s.get("sampling.max_tokens") == 4096 and s.notes
    assert (tmp_path / "settings.json.bad").exists()


def test_first_load_takes_the_catalogs_recommended_values_then_the_users(tmp_path):
    s = Settings.load(tmp_path / "settings.json")
    recommended = recommended_for("/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert recommended["temperature"] == 0.2
    key = model_key("/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert key == "smollm2-135m"
    assert s.first_load(key, recommended) is True
    assert s.get("sampling.temperature", key) == 0.2 and s.get("chat.thinking", key) is False
    s.set("sampling.temperature", 0.5, key)
    assert s.first_load(key, recommended) is False  # the user's value stays
    assert s.get("sampling.temperature", key) == 0.5
    assert model_key("/x/Clover-35B-A3B.patched.gguf") == "clover-35b-a3b"
    assert model_key("/x/unknown-model.gguf") == "unknown-model.gguf"
