"""The elastic driver's plan: when discovery adds a host, a plain elastic job grows to --max-np and an
autoscaled one keeps the count rank 0's autoscaler asked for (ElasticOptions.autoscaled); a worker that
exited after the loop's reap keeps its slot until the next reap."""
from pyhorovod.runner import elastic_driver as D


class _Discovery:
    def __init__(self, hosts):
        self.hosts = dict(hosts)

    def current(self):
        return dict(self.hosts)


class _Store:
    """No target key written yet (rank 0 has not asked)."""

    def check(self, key):
        return False


def _planned_target(autoscaled: bool) -> int:
    disc = _Discovery({"a": 2})
    opts = D.ElasticOptions(launch=None, discovery=disc, np=1, min_np=1, max_np=4, autoscaled=autoscaled)
    d = D.ElasticDriver(opts)
    d._client = _Store()
    d._start = lambda host: None   # count the plan, start nothing
    d.finished = object()          # no starts: only the target is under test
    disc.hosts["b"] = 2            # discovery adds a host
    d._plan()
    return d.target


def test_added_host_raises_a_plain_elastic_job_to_max_np():
    assert _planned_target(autoscaled=False) == 4


def test_added_host_keeps_an_autoscaled_jobs_target():
    assert _planned_target(autoscaled=True) == 1


class _Alive:
    running = True


class _Exited:
    """A worker process that has exited (the reap has not seen it yet)."""
    running = False


def test_a_worker_exiting_after_the_reap_keeps_its_slot_until_reaped():
    # Two hosts of one slot, both workers started; b's worker dies between this loop's reap and its plan.
    # The plan must not start a replacement on b: the next reap may blacklist b.
    opts = D.ElasticOptions(launch=None, discovery=_Discovery({"a": 1, "b": 1}), np=2, min_np=1, max_np=2)
    d = D.ElasticDriver(opts)
    d._client = _Store()
    started = []
    d._start = lambda host: started.append(host)
    d.workers = [D.Worker(0, "a", _Alive()), D.Worker(1, "b", _Exited())]
    d._plan()
    assert started == []
    d.workers[1].reaped = True   # the reap saw the exit (and would blacklist b if it failed)
    d._plan()
    assert started == ["b"]
