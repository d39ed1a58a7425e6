"""The models on this machine as the picker lists them: the models folder, files used from
elsewhere, sizes, last used, and the plan in a few words."""

from __future__ import annotations

import json

from app.machine.gpu import probe_with
from app.machine.snapshot import Machine
from app.machine.system_memory import SystemMemory
from app.model.local_models import LocalModels, plan_summary, size_words, title, when_words
from tests.helpers.fakes import FakeGpu, FakeNVML, NVMLError_LibraryNotFound
from tests.helpers.gguf_models import write_llama, write_split

GiB = 1024**3


def test_the_folder_split_models_once_projectors_left_out_files_used_elsewhere_kept(tmp_path):
    folder, elsewhere = tmp_path / "models", tmp_path / "elsewhere"
    (folder / "repo").mkdir(parents=True)
    elsewhere.mkdir()
    (folder / "repo" / "Tiny-Q4_K_M.gguf").write_bytes(b"x" * 3000)
    for i in (1, 2, 3):
        (folder / f"Big-0000{i}-of-00003.gguf").write_bytes(b"x" * 1000 * i)
    (folder / "mmproj-Tiny-f16.gguf").write_bytes(b"x")
    (folder / "Tiny.gguf.partial").write_bytes(b"x")
    mine = elsewhere / "Mine.gguf"
    mine.write_bytes(b"x" * 10)
    state = tmp_path / "data" / "local_models.json"
    models = LocalModels(folder, state)
    assert [(m.name, m.size, m.by_hand, m.last_used) for m in models.models()] == [
        ("Big", 6000, False, None), ("Tiny-Q4_K_M", 3000, False, None)]  # never used: by name

    models.used(mine, when=1000.0)
    models.used(folder / "repo" / "Tiny-Q4_K_M.gguf", when=2000.0)
    again = LocalModels(folder, state)  # a restart: read back from the data folder
    assert [(m.name, m.by_hand, m.last_used) for m in again.models()] == [
        ("Tiny-Q4_K_M", False, 2000.0), ("Mine", True, 1000.0), ("Big", False, None)]
    mine.unlink()  # a file that is gone is not listed, and still remembered
    assert "Mine" not in [m.name for m in again.models()]
    assert str(mine.resolve()) in json.loads(state.read_text())["last_used"]


def test_an_unreadable_memory_lists_the_folder_still(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "A.gguf").write_bytes(b"x")
    state = tmp_path / "local_models.json"
    state.write_text("{not json")
    models = LocalModels(folder, state)
    assert [m.name for m in models.models()] == ["A"]
    models.used(folder / "A.gguf", when=5.0)  # and it is written whole again
    assert models.models()[0].last_used == 5.0


def test_the_plan_in_a_few_words(tmp_path):
    model = write_llama(tmp_path / "llama.gguf")
    cpu = Machine(probe_with(FakeNVML(init_error=NVMLError_LibraryNotFound("no NVML"))),
                  SystemMemory(64 * GiB, 56 * GiB))
    gpu = Machine(probe_with(FakeNVML([FakeGpu("NVIDIA GPU", 24.0)])), SystemMemory(64 * GiB, 56 * GiB))
    assert plan_summary(model, cpu).startswith("on the CPU · ")
    assert plan_summary(model, gpu).startswith("all on GPU · ") and plan_summary(model, gpu).endswith(" context")
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF nonsense")
    assert plan_summary(broken, gpu).startswith("cannot be read: ")
    (tmp_path / "split").mkdir()
    parts = write_split(model, tmp_path / "split", 2)
    assert title(parts[0]) == "llama" and plan_summary(parts[0], gpu).startswith("all on GPU")


def test_sizes_and_times_in_words():
    assert size_words(98_362_432) == "98 MB" and size_words(4_600_000_000) == "4.6 GB"
    assert when_words(None) == "never used"
    assert when_words(1000.0, now=1030.0) == "used just now"
    assert when_words(0.0, now=3 * 3600 + 5) == "used 3 h ago"
    assert when_words(0.0, now=86400 * 1.5) == "used yesterday"
    assert when_words(0.0, now=86400 * 4) == "used 4 days ago"
