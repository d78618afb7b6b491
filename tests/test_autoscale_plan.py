"""The elastic driver's plan when discovery adds a host: a plain elastic job grows to --max-np, an autoscaled
one keeps the count rank 0's autoscaler asked for (ElasticOptions.autoscaled)."""
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
