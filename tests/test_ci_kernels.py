"""CI's second pass over the kernel-sensitive tests with the baseline CPU variant forced (issue 51):
the list names files that exist, and .ci/run runs that pass."""

from __future__ import annotations

from tests.conftest import KERNEL_SENSITIVE, ROOT


def test_every_kernel_sensitive_file_exists():
    missing = sorted(p for p in KERNEL_SENSITIVE if not (ROOT / p).is_file())
    assert not missing, f"renamed or removed: update tests/conftest.py KERNEL_SENSITIVE: {missing}"


def test_ci_runs_them_again_on_the_x64_variant():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "CLOVER_CPU_VARIANT=x64 python3 packaging/bootstrap.py test -m kernels" in ci
