"""The NVML probe against fake NVML modules: every outcome a user's machine can have."""

from __future__ import annotations

from app.machine import gpu
from tests.helpers.fakes import FakeGpu, FakeNVML, FakeNVMLError, NVMLError_LibraryNotFound, rtx_4090


def test_one_gpu_is_described_fully():
    nvml = FakeNVML([FakeGpu("NVIDIA RTX A4000", 16.0, used_gib=1.25, cc=(8, 6),
                             processes=[(4242, 1 << 30, "/usr/bin/Xorg")])])
    p = gpu.probe_with(nvml)
    assert p.status == gpu.STATUS_OK and p.has_gpu
    assert p.driver_version == "580.95.05" and p.cuda_driver_version == "13.0"
    g = p.gpus[0]
    assert g.name == "NVIDIA RTX A4000"
    assert g.total_bytes == 16 * 1024**3 and g.used_bytes == int(1.25 * 1024**3)
    assert g.free_bytes == g.total_bytes - g.used_bytes
    assert g.compute_capability == (8, 6) and g.mig_enabled is False
    assert g.processes == ((4242, 1 << 30, "/usr/bin/Xorg"),)
    assert nvml.shutdowns == 1
    assert "RTX A4000" in p.summary() and "14.8 of 16.0 GiB free" in p.summary()


def test_two_gpus_and_mig_and_unsupported_queries():
    p = gpu.probe_with(FakeNVML([rtx_4090(), FakeGpu("NVIDIA H100 80GB HBM3", 79.6, cc=(9, 0), mig=1),
                                 FakeGpu("Old GPU", 8, mig=None)]))
    assert [g.index for g in p.gpus] == [0, 1, 2]
    assert p.gpus[1].mig_enabled is True
    assert p.gpus[2].mig_enabled is None  # "Not Supported" is not an error


def test_missing_nvml_library_means_cpu_mode():
    p = gpu.probe_with(FakeNVML(init_error=NVMLError_LibraryNotFound("NVML Shared Library Not Found")))
    assert p.status == gpu.STATUS_NO_NVML and not p.has_gpu
    assert "CPU mode" in p.summary()


def test_driver_failure_is_reported_not_raised():
    p = gpu.probe_with(FakeNVML(init_error=FakeNVMLError("Driver/library version mismatch")))
    assert p.status == gpu.STATUS_DRIVER_ERROR
    assert "version mismatch" in p.message


def test_no_gpu_listed():
    p = gpu.probe_with(FakeNVML([]))
    assert p.status == gpu.STATUS_NO_GPU and not p.has_gpu


def test_real_probe_never_raises():
    gpu.probe.cache_clear()
    p = gpu.probe()
    assert p.status in (gpu.STATUS_OK, gpu.STATUS_NO_NVML, gpu.STATUS_DRIVER_ERROR, gpu.STATUS_NO_GPU)
    assert p.has_gpu == (p.status == gpu.STATUS_OK)
