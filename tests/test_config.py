"""pyhorovod/_config.py: every environment variable, its default, and errors naming the variable."""
import pytest

from pyhorovod._config import LOG_LEVELS, Config


def test_defaults_match_engine_defaults():
    c = Config.from_env({})
    assert c.fusion_threshold_bytes == 128 << 20 and c.fusion_max_tensor_bytes == 1 << 20
    assert c.cycle_time_ms == 1.0
    assert c.cache_capacity == 1024
    assert c.timeline_path == "" and c.timeline_mark_cycles is False
    assert c.stall_check_s == 60.0 and c.stall_shutdown_s == 0.0 and c.stall_check_disable is False
    assert c.log_level == LOG_LEVELS["warning"] == 3
    assert c.dynamic_process_sets is False
    assert c.iface is None and c.hostname is None
    assert c.timeout_s == 1800.0 and c.connect_timeout_s == 60.0
    assert c.segment_bytes == 0 and c.small_threshold_bytes == 0 and c.shm_enable is True
    assert (c.shm_spin_us, c.shm_spin_yield) == (-1, -1)
    assert c.gpu_path == "auto"


def test_every_variable_is_read():
    env = {
        "HOROVOD_FUSION_THRESHOLD": "1048576", "HOROVOD_CYCLE_TIME": "2.5", "HOROVOD_CACHE_CAPACITY": "0",
        "HOROVOD_TIMELINE": "/tmp/t.json", "HOROVOD_TIMELINE_MARK_CYCLES": "1",
        "HOROVOD_STALL_CHECK_TIME_SECONDS": "7", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "30",
        "HOROVOD_STALL_CHECK_DISABLE": "true", "HOROVOD_LOG_LEVEL": "DEBUG",
        "HOROVOD_DYNAMIC_PROCESS_SETS": "yes", "HOROVOD_GLOO_IFACE": "eth1",
        "PYHOROVOD_TIMEOUT_SECONDS": "12.5", "PYHOROVOD_CONNECT_TIMEOUT_SECONDS": "4",
        "PYHOROVOD_SEGMENT_BYTES": "65536", "PYHOROVOD_SMALL_THRESHOLD_BYTES": "4096", "PYHOROVOD_SHM": "0",
        "HOROVOD_HOSTNAME": "node7", "PYHOROVOD_SHM_SPIN_US": "50", "PYHOROVOD_SHM_SPIN_YIELD": "0",
        "PYHOROVOD_FUSION_MAX_TENSOR_BYTES": "0", "PYHOROVOD_GPU_PATH": "Staged",
    }
    c = Config.from_env(env)
    assert (c.fusion_threshold_bytes, c.cycle_time_ms, c.cache_capacity) == (1 << 20, 2.5, 0)
    assert (c.timeline_path, c.timeline_mark_cycles) == ("/tmp/t.json", True)
    assert (c.stall_check_s, c.stall_shutdown_s, c.stall_check_disable) == (7.0, 30.0, True)
    assert c.log_level == 1 and c.dynamic_process_sets is True and c.iface == "eth1"
    assert (c.timeout_s, c.connect_timeout_s) == (12.5, 4.0)
    assert (c.segment_bytes, c.small_threshold_bytes, c.shm_enable) == (65536, 4096, False)
    assert c.hostname == "node7" and (c.shm_spin_us, c.shm_spin_yield) == (50, 0)
    assert c.fusion_max_tensor_bytes == 0
    assert c.gpu_path == "staged"


def test_own_names_win_over_horovod_names():
    c = Config.from_env({"HOROVOD_GLOO_IFACE": "eth1", "PYHOROVOD_IFACE": "lo",
                         "HOROVOD_HOSTNAME": "a", "PYHOROVOD_HOSTNAME": "b"})
    assert (c.iface, c.hostname) == ("lo", "b")


def test_timeline_dynamic_means_off_until_started():
    assert Config.from_env({"HOROVOD_TIMELINE": "DYNAMIC"}).timeline_path == ""


def test_empty_values_count_as_unset():
    assert Config.from_env({"HOROVOD_CYCLE_TIME": "", "PYHOROVOD_SHM": " "}) == Config()


@pytest.mark.parametrize("name,value", [
    ("HOROVOD_FUSION_THRESHOLD", "64MB"), ("HOROVOD_FUSION_THRESHOLD", "-1"), ("HOROVOD_CYCLE_TIME", "fast"),
    ("HOROVOD_CACHE_CAPACITY", "1.5"), ("HOROVOD_TIMELINE_MARK_CYCLES", "maybe"),
    ("HOROVOD_STALL_CHECK_TIME_SECONDS", "nan"), ("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "-3"),
    ("HOROVOD_STALL_CHECK_DISABLE", "2"), ("HOROVOD_LOG_LEVEL", "loud"),
    ("HOROVOD_DYNAMIC_PROCESS_SETS", "x"), ("PYHOROVOD_TIMEOUT_SECONDS", "0"),
    ("PYHOROVOD_TIMEOUT_SECONDS", "inf"), ("PYHOROVOD_CONNECT_TIMEOUT_SECONDS", "soon"),
    ("PYHOROVOD_SEGMENT_BYTES", "1e6"), ("PYHOROVOD_SMALL_THRESHOLD_BYTES", "-5"), ("PYHOROVOD_SHM", "sometimes"),
    ("PYHOROVOD_SHM_SPIN_US", "-2"), ("PYHOROVOD_SHM_SPIN_YIELD", "2"), ("PYHOROVOD_GPU_PATH", "ipc"),
])
def test_invalid_value_names_the_variable(name, value):
    with pytest.raises(ValueError, match=name):
        Config.from_env({name: value})


def test_engine_options_are_filled():
    c = Config.from_env({"HOROVOD_FUSION_THRESHOLD": "1000", "HOROVOD_CYCLE_TIME": "3",
                         "PYHOROVOD_SEGMENT_BYTES": "8192", "PYHOROVOD_SHM": "0", "HOROVOD_LOG_LEVEL": "error",
                         "PYHOROVOD_TIMEOUT_SECONDS": "9", "PYHOROVOD_CONNECT_TIMEOUT_SECONDS": "8",
                         "PYHOROVOD_GPU_PATH": "nccl"})
    o = c.engine_options(rank=1, size=4, local_rank=1, local_size=2, cross_rank=0, cross_size=2,
                         store_host="127.0.0.1", store_port=1234, secret=b"s3cret", bind_host="127.0.0.1",
                         store_prefix="phv/g0", process_sets=[[0, 1], [2, 3]])
    assert (o.connect.rank, o.connect.size, o.connect.local_rank, o.connect.local_size) == (1, 4, 1, 2)
    assert (o.cross_rank, o.cross_size) == (0, 2)
    assert (o.connect.store_host, o.connect.store_port, o.connect.store_prefix) == ("127.0.0.1", 1234, "phv/g0")
    assert o.connect.shm_enable is False and o.connect.tuning.segment_bytes == 8192
    assert o.connect.connect_timeout_s == 8.0 and o.timeout_s == 9.0
    assert o.fusion_threshold_bytes == 1000 and o.cycle_time_ms == 3.0 and o.fusion_max_tensor_bytes == 1 << 20
    assert int(o.log_level) == 4 and o.gpu_path == "nccl"
    assert c.engine_options(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1,
                            store_host="127.0.0.1", store_port=1, secret=b"s", bind_host="127.0.0.1",
                            store_prefix="p").gpu_path == "nccl"
    assert [list(s) for s in o.process_sets] == [[0, 1], [2, 3]]
