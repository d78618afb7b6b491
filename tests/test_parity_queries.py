"""Horovod's capability queries with Horovod's return values: nccl_built() is NCCL_VERSION_CODE of the
nccl.h the extension was compiled against (an int, 0 without NCCL), mpi_threads_supported() raises
ValueError because MPI is never enabled, the other queries are bools; pyhorovod.torch and
pyhorovod.torch.mpi_ops export the same functions."""
import os
import re

import pytest

import pyhorovod

QUERIES = ["mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built", "gloo_enabled", "nccl_built",
           "cuda_built", "rocm_built", "ddl_built", "ccl_built", "tcp_built"]


def _header_version_code():
    """NCCL_VERSION_CODE from the nccl.h of the nvidia-nccl wheel (where cmake/nccl.cmake finds it
    unless NCCL_ROOT/NCCL_HOME point elsewhere), or None."""
    if os.environ.get("NCCL_ROOT") or os.environ.get("NCCL_HOME"):
        return None
    try:
        import nvidia.nccl
    except ImportError:
        return None
    header = os.path.join(list(nvidia.nccl.__path__)[0], "include", "nccl.h")
    if not os.path.exists(header):
        return None
    m = re.search(r"^#define NCCL_VERSION_CODE (\d+)", open(header).read(), re.M)
    return int(m.group(1)) if m else None


def test_nccl_built_is_the_version_code():
    info = pyhorovod.build_info()
    got = pyhorovod.nccl_built()
    assert type(got) is int, f"nccl_built() returned {got!r} ({type(got).__name__}), Horovod returns an int"
    assert got == info["nccl_version"]
    if not info["nccl"]:
        assert got == 0
        return
    # Horovod's rule, NCCL_VERSION(major, minor, patch) from nccl.h: 2.8.x and before are major*1000 + ...
    assert got > 2800, got
    expected = _header_version_code()
    if expected is None:
        pytest.skip("the NCCL build used a header other than the nvidia-nccl wheel's; cannot read its version")
    assert got == expected


def test_mpi_threads_supported_raises_without_mpi():
    with pytest.raises(ValueError, match="MPI"):
        pyhorovod.mpi_threads_supported()


def test_other_queries_are_bools():
    expected = {"mpi_built": False, "mpi_enabled": False, "gloo_built": False, "gloo_enabled": False,
                "rocm_built": False, "ddl_built": False, "ccl_built": False, "tcp_built": True,
                "cuda_built": bool(pyhorovod.build_info()["cuda"])}
    for name, value in expected.items():
        got = getattr(pyhorovod, name)()
        assert type(got) is bool and got == value, (name, got)


def test_torch_and_mpi_ops_export_the_queries():
    pytest.importorskip("torch")
    import pyhorovod.torch as hvd
    import pyhorovod.torch.mpi_ops as mpi_ops
    for name in QUERIES:
        assert getattr(hvd, name) is getattr(pyhorovod, name), name
        assert name in hvd.__all__, name
        if name != "tcp_built":  # pyhorovod's own query; horovod.torch.mpi_ops has no tcp_built
            assert getattr(mpi_ops, name) is getattr(pyhorovod, name), name
