"""The one translation of core errors: each C++ ErrorKind has its _core class (with .kind), and each _core
class becomes one pyhorovod class, the message kept verbatim."""
import pytest

from pyhorovod import _core, errors
from pyhorovod.errors import HorovodInternalError, HorovodTimeoutError

KINDS = {"InvalidArgumentError": ("INVALID_ARGUMENT", ValueError),
         "InternalError": ("INTERNAL", HorovodInternalError),
         "TimeoutError_": ("TIMEOUT", HorovodTimeoutError),
         "PeerLostError": ("PEER_LOST", HorovodInternalError),
         "ShutdownError": ("SHUTDOWN", HorovodInternalError),
         "InterruptedError_": ("INTERRUPTED", HorovodInternalError)}


@pytest.mark.parametrize("core_name", sorted(KINDS))
def test_each_core_class_maps_to_one_of_ours(core_name):
    kind, ours = KINDS[core_name]
    cls = getattr(_core, core_name)
    assert issubclass(cls, _core.CoreError) and cls.kind == kind
    assert issubclass(cls, _core.InternalError) == (kind != "INVALID_ARGUMENT")
    mapped = errors.translate(cls("rank 0: allreduce 'x' failed"))
    assert type(mapped) is ours and str(mapped) == "rank 0: allreduce 'x' failed"


def test_other_exceptions_pass_through():
    e = KeyError("k")
    assert errors.translate(e) is e
    with pytest.raises(KeyError):
        with errors.translated():
            raise e


def test_translated_keeps_the_core_error_as_cause():
    with pytest.raises(HorovodTimeoutError) as info:
        with errors.translated():
            raise _core.TimeoutError_("late")
    assert isinstance(info.value.__cause__, _core.TimeoutError_)
    with pytest.raises(ValueError) as info:
        try:
            raise _core.InvalidArgumentError("bad")
        except _core.CoreError as e:
            errors.raise_translated(e)
    assert str(info.value) == "bad" and isinstance(info.value.__cause__, _core.InvalidArgumentError)


def test_a_raised_core_error_carries_its_kind():
    """Raised by the C++ translator: an instance of its kind's class, .kind set on the instance."""
    with pytest.raises(_core.CoreError) as info:
        _core.TcpStore("127.0.0.1", 1, b"s", 0.2)  # nothing listens on port 1
    assert info.value.kind in ("TIMEOUT", "PEER_LOST", "INTERNAL")
    assert type(info.value) is getattr(_core, {v[0]: k for k, v in KINDS.items()}[info.value.kind])
