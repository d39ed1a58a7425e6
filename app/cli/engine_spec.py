"""A model named on the command line as `compare` and `bench bfcl` take it: a .gguf path,
`endpoint:NAME` (added in the app) or `URL[#model]`. No Qt."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.bench.compare import EngineSpec


def parse_engine_spec(text: str, n_ctx: int | None = None) -> EngineSpec:
    """A compare operand: a .gguf path, `endpoint:NAME` (added in the app), or `URL[#model]`."""
    from pathlib import Path

    from app.bench.compare import EngineSpec
    from app.engine.endpoints import load_endpoints
    from app.engine.remote import Endpoint

    if text.startswith("endpoint:"):
        name = text.split(":", 1)[1]
        for e in load_endpoints():
            if e.name == name:
                return EngineSpec(name, endpoint=e)
        raise ValueError(f"no endpoint named {name!r} (add it on the Engines page)")
    if text.startswith(("http://", "https://")):
        url, _, model = text.partition("#")
        return EngineSpec(text, endpoint=Endpoint(url, url, model))
    if text.endswith(".gguf") and not Path(text).exists():
        raise ValueError(f"{text}: No such file or directory")
    if not Path(text).is_file():
        raise ValueError(f"{text}: not a GGUF file, an endpoint:NAME or a URL")
    return EngineSpec(Path(text).stem, path=text, n_ctx=n_ctx)
