"""Catalog entries the user adds by name and URL."""

from __future__ import annotations

import pytest

from app.fetch.catalog import CatalogError, entry_for_url


@pytest.mark.parametrize("name", ["Qwen3.6 35B A3B UD Q4_K_XL from my own mirror, the long-context build v2", "x" * 200,
                                  "a" * 58 + " .", "!!!"])
def test_a_long_or_odd_name_still_makes_a_valid_id(name):
    entry = entry_for_url(name, "https://example.com/models/model.gguf")
    assert entry.id.startswith("user-") and len(entry.id) <= 64 and entry.id[-1] not in "-."
    assert entry.name == name and entry.file_name == "model.gguf"


def test_a_url_that_names_no_gguf_file_is_refused():
    with pytest.raises(CatalogError, match="should end in a .gguf"):
        entry_for_url("model", "https://example.com/models/readme.md")
