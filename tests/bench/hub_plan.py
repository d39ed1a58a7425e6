"""Planning a whole Hub repo from its headers: a 20-file repo on the fake Hub with 50 ms added to every
request, as the model browser does it (file list, then every header over HTTP Range, in parallel).

    python -m tests.bench.hub_plan [--files 20] [--latency 0.05] [--workers N]

Prints the time for the file list and for planning every file (cold: nothing cached; then warm: the
headers' facts cached by SHA-256), the requests made and the bytes read per header. Target: every
file planned in < 3 s cold.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from tests.bench.verdict import Verdicts


def build_repo(folder: Path, n_files: int):
    from tests.helpers.clover_shape import write_clover_shaped
    from tests.helpers.fake_hub import FakeRepo
    from tests.helpers.gguf_models import write_glm4_moe
    from tests.helpers.hub_repos import tiny_quants

    files: dict[str, Path] = {
        "Clover-35B-A3B-Q4_K_M.gguf": write_clover_shaped(folder / "clover-shape.gguf"),  # sparse, 19.8 GB
        "tiny-clover-vendor-F32.gguf": write_glm4_moe(folder / "vendor.gguf", dialect="vendor"),
    }
    stem = 0
    while len(files) < n_files:
        for name, path in tiny_quants(folder, stem=f"model{stem}").items():
            if len(files) < n_files:
                files[name] = path
        stem += 1
    return FakeRepo("bench/twenty-GGUF", files, downloads=1), files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds added to every request")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    os.environ["CLOVER_HOME"] = tempfile.mkdtemp(prefix="clover-hub-bench-")

    from app.fetch import hub
    from app.machine.gpu import probe_with
    from app.machine.snapshot import Machine
    from tests.helpers.fake_hub import HubState, fake_hub
    from tests.helpers.fakes import FakeNVML, rtx_4090

    folder = Path(tempfile.mkdtemp(prefix="clover-hub-repo-"))
    repo, files = build_repo(folder, args.files)
    state = HubState(latency=args.latency)
    state._sha[files["Clover-35B-A3B-Q4_K_M.gguf"]] = "c" * 64  # hashing 20 GB of zeros is not the point
    state.add(repo)
    machine = Machine.read(probe_with(FakeNVML([rtx_4090()])))
    workers = {"workers": args.workers} if args.workers else {}
    with fake_hub(state) as url:
        os.environ["HF_ENDPOINT"] = url
        hub.CACHE._mem.clear()
        started = time.perf_counter()
        listing = hub.Hub().listing(repo.repo_id)
        list_s = time.perf_counter() - started
        requests_before = len(state.requests)
        started = time.perf_counter()
        plans = hub.plan_files(repo.repo_id, listing.models, machine, **workers)
        cold_s = time.perf_counter() - started
        header_requests = len(state.requests) - requests_before
        started = time.perf_counter()
        warm = hub.plan_files(repo.repo_id, listing.models, machine, **workers)
        warm_s = time.perf_counter() - started
    errors = [f"{p.file.name}: {p.error}" for p in plans if p.error]
    read = [p.header_bytes for p in plans if not p.error]
    sizes = {p.file.name: p.file.size for p in plans}
    print(f"{len(plans)} GGUF files, {args.latency * 1000:.0f} ms added per request, "
          f"{args.workers or hub.HEADER_WORKERS} header reads at once")
    print(f"  file list (model_info with blobs)   {list_s:6.2f} s")
    verdicts = Verdicts()
    verdict = verdicts.check("hub: every file planned, cold (s)", cold_s, cold_s < 3, "< 3 s", "{:.2f}")
    print(f"  every file planned, cold            {cold_s:6.2f} s   (target < 3 s)  {verdict}")
    print(f"  again, facts cached by SHA-256      {warm_s:6.2f} s   ({sum(p.cached for p in warm)} from the cache)")
    per_file = header_requests / max(len(plans), 1)
    print(f"  requests for the headers            {header_requests} ({per_file:.1f} per file)")
    print(f"  bytes read per header               median {statistics.median(read) / 1024:.0f} KiB, "
          f"max {max(read) / 1024:.0f} KiB")
    clover = next(p for p in plans if p.file.name.startswith("Clover"))
    print(f"  the Clover-shaped file              {clover.header_bytes / 1024:.0f} KiB read of "
          f"{sizes[clover.file.name] / 1e9:.1f} GB ({clover.header_bytes / sizes[clover.file.name]:.1e} of it); "
          f"{'fits' if clover.fits else 'does not fit'} a 24 GB card")
    if errors:
        print("  errors:\n    " + "\n    ".join(errors))
    return max(verdicts.finish(), 1 if errors else 0)


if __name__ == "__main__":
    raise SystemExit(main())
