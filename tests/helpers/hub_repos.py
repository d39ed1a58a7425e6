"""The fake Hub's repos for the browser's tests and benchmark: several quants of a generated model,
the Clover dialect double, a 3-part split model, a gated repo, a repo whose 'GGUF' is an HTML page."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.fake_hub import FakeRepo, HubState
from tests.helpers.gguf_models import ModelShape, write_glm4_moe, write_llama, write_split

SPLIT_SOURCE: Path | None = None  # the split model before splitting (to compare plans with)


def tiny_quants(folder: Path, stem: str = "tiny-llama",
                quants: tuple[str, ...] = ("Q4_0", "Q8_0", "F16")) -> dict[str, Path]:
    """The same small llama model in several quantizations, named as publishers name them."""
    import numpy as np

    out = {}
    for q in quants:  # large enough (2-9 MB) that a header read is a small part of each file
        size = dict(n_embd=256, n_head=4, n_head_kv=2, n_layer=4, n_ff=768)
        shape = ModelShape(**size, dtype=np.float16) if q == "F16" else ModelShape(**size, qtype=q)
        out[f"{stem}-{q}.gguf"] = write_llama(folder / f"{stem}-{q}.gguf", shape)
    return out


def clover_hub_state(folder: Path) -> tuple[HubState, dict[str, Path]]:
    """A fake Hub with one repo, clover-lab/Clover-35B-A3B-GGUF: the small quants and a Clover-shaped
    file (sparse, 20 GB on the listing); (the state, the repo's files) for the pages' screenshots."""
    from tests.helpers.clover_shape import write_clover_shaped

    files = tiny_quants(folder, stem="Clover-35B-A3B")
    clover = write_clover_shaped(folder / "Clover-35B-A3B-Q4_K_M.gguf")
    files["Clover-35B-A3B-Q4_K_M.gguf"] = clover
    state = HubState()
    state._sha[clover] = "0" * 64  # a sparse 20 GB file: its real hash is not the point here
    state.add(FakeRepo("clover-lab/Clover-35B-A3B-GGUF", files, downloads=12_000, likes=340))
    return state, files


def hub_state(folder: Path) -> HubState:
    global SPLIT_SOURCE
    folder.mkdir(parents=True, exist_ok=True)
    state = HubState()
    files = tiny_quants(folder)
    files["mmproj-tiny-F16.gguf"] = files["tiny-llama-F16.gguf"]
    state.add(FakeRepo("clover-lab/tiny-llama-GGUF", files, downloads=5000, likes=42,
                       extra_files={"README.md": b"# tiny llama\n", "config.json": b"{}"}))
    state.add(FakeRepo("clover-lab/tiny-clover-GGUF", {
        "tiny-clover-vendor-F32.gguf": write_glm4_moe(folder / "vendor.gguf", dialect="vendor"),
        "tiny-clover-upstream-F32.gguf": write_glm4_moe(folder / "upstream.gguf", dialect="upstream"),
    }, downloads=1200, likes=7))
    SPLIT_SOURCE = files["tiny-llama-F16.gguf"]
    split_dir = folder / "split"
    split_dir.mkdir(exist_ok=True)
    parts = write_split(SPLIT_SOURCE, split_dir, 3, stem="tiny-split-F16")
    state.add(FakeRepo("clover-lab/tiny-split-GGUF", {p.name: p for p in parts}, downloads=300, likes=1))
    state.add(FakeRepo("clover-lab/gated-GGUF",
                       {"gated-Q4_0.gguf": files["tiny-llama-Q4_0.gguf"]}, downloads=100, gated=True,
                       license="other"))
    page = folder / "login.html"
    page.write_text("<!DOCTYPE html><html><body>Sign in to continue</body></html>" + " " * 2000)
    state.add(FakeRepo("clover-lab/broken-GGUF", {"broken-Q4_0.gguf": page}, downloads=10))
    return state
