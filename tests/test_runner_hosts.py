"""Unit tests of the launcher's pieces without starting a job: host lists, hostfiles, slot assignment,
local-host detection, the ssh command line and its stdin payload, the remote wrapper's stop-on-EOF."""
import os
import shlex
import signal
import subprocess
import time

import pytest

from pyhorovod.runner import hosts, remote
from pyhorovod.runner.hosts import HostSpec
from runner_util import pid_alive, wait_gone


def test_parse_hosts():
    assert hosts.parse_hosts("host1:2,host2:2") == [HostSpec("host1", 2), HostSpec("host2", 2)]
    assert hosts.parse_hosts("a, b:3 ,a:2") == [HostSpec("a", 3), HostSpec("b", 3)]  # duplicates add up
    assert hosts.parse_hosts("[::1]:4,10.0.0.1") == [HostSpec("::1", 4), HostSpec("10.0.0.1", 1)]


@pytest.mark.parametrize("text,message", [
    ("a:x", "slot count 'x' is not an integer"), ("a:0", "slot count must be >= 1, got 0"),
    (",,", "no hosts"), (":2", "empty host name"), ("[::1:2", "unterminated"),
])
def test_parse_hosts_errors(text, message):
    with pytest.raises(ValueError, match=message):
        hosts.parse_hosts(text)


def test_parse_hostfile(tmp_path):
    path = tmp_path / "hostfile"
    path.write_text("# cluster\nnode1 slots=4\n\nnode2   slots=2 max_slots=8  # comment\nnode3\n")
    assert hosts.parse_hostfile(str(path)) == [HostSpec("node1", 4), HostSpec("node2", 2), HostSpec("node3", 1)]
    path.write_text("node1 slots=two\n")
    with pytest.raises(ValueError, match=r"hostfile:1: slot count 'two'"):
        hosts.parse_hostfile(str(path))
    path.write_text("node1 cpus=2\n")
    with pytest.raises(ValueError, match=r"hostfile:1: unknown field 'cpus'"):
        hosts.parse_hostfile(str(path))
    path.write_text("# nothing\n")
    with pytest.raises(ValueError, match="lists no hosts"):
        hosts.parse_hostfile(str(path))


def coords(slots):
    return [(s.rank, s.hostname, s.local_rank, s.local_size, s.cross_rank, s.cross_size) for s in slots]


def test_assign_slots_two_by_two():
    slots = hosts.assign_slots([HostSpec("a", 2), HostSpec("b", 2)], 4)
    assert coords(slots) == [(0, "a", 0, 2, 0, 2), (1, "a", 1, 2, 0, 2), (2, "b", 0, 2, 1, 2), (3, "b", 1, 2, 1, 2)]
    assert all(s.size == 4 for s in slots)


def test_assign_slots_uneven_and_partial():
    # a:3, b:1, c:2 with np=5: a gets 3, b 1, c 1 (hosts are filled in order).
    slots = hosts.assign_slots([HostSpec("a", 3), HostSpec("b", 1), HostSpec("c", 2)], 5)
    assert coords(slots) == [(0, "a", 0, 3, 0, 3), (1, "a", 1, 3, 0, 1), (2, "a", 2, 3, 0, 1),
                             (3, "b", 0, 1, 1, 3), (4, "c", 0, 1, 2, 3)]
    # np smaller than the first host: the other hosts get nothing.
    assert coords(hosts.assign_slots([HostSpec("a", 4), HostSpec("b", 4)], 2)) == [(0, "a", 0, 2, 0, 1),
                                                                                   (1, "a", 1, 2, 0, 1)]


def test_assign_slots_errors():
    with pytest.raises(ValueError, match=r"-np 5 needs 5 slots but the hosts offer only 4 \(a:2,b:2\)"):
        hosts.assign_slots([HostSpec("a", 2), HostSpec("b", 2)], 5)
    with pytest.raises(ValueError, match="-np must be >= 1"):
        hosts.assign_slots([HostSpec("a", 2)], 0)


def test_local_hosts_and_interfaces():
    assert hosts.interface_address("lo") == "127.0.0.1"
    assert hosts.local_addresses()["127.0.0.1"] == "lo"
    for name in ("localhost", "127.0.0.1", "127.0.1.1", os.uname().nodename):
        assert hosts.is_local(name), name
    assert not hosts.is_local("no-such-host.invalid")
    assert not hosts.is_local("192.0.2.1")  # TEST-NET-1: documentation only, never ours
    with pytest.raises(ValueError, match="'nosuch0' does not exist"):
        hosts.interface_address("nosuch0")
    assert hosts.route_source_address("127.0.0.1") == "127.0.0.1"


def test_ssh_command_line():
    agent = remote.agent_argv(None, ssh_port=2222, identity_file="/k/id")
    assert agent == ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "LogLevel=ERROR",
                     "-p", "2222", "-i", "/k/id"]
    argv = remote.ssh_argv(agent, "node7", ["python", "train.py", "--lr", "0.1 x"], "/work dir")
    assert argv[:-1] == agent + ["node7"]
    # The remote string: cd, then sh -c WRAPPER with the user's argv, each word quoted; nothing else.
    words = shlex.split(argv[-1])
    assert words[:4] == ["cd", "/work dir", "&&", "exec"]
    assert words[4:6] == ["sh", "-c"] and words[6] == remote.WRAPPER
    assert words[7:] == ["pyhorovod-rank", "python", "train.py", "--lr", "0.1 x"]
    assert remote.agent_argv("ip netns exec") == ["ip", "netns", "exec"]


def test_stdin_payload_and_forwarded_environment():
    env = remote.forwardable_env({"PATH": "/bin", "HOME": "/root", "SSH_AUTH_SOCK": "/s", "OMPI_X": "1",
                                  "BASH_FUNC_f%%": "() { :; }", "MY_VAR": "it's \"quoted\"\nline 2"})
    assert env == {"PATH": "/bin", "MY_VAR": "it's \"quoted\"\nline 2"}
    payload = remote.stdin_payload(dict(env, PYHOROVOD_SECRET="abc123")).decode()
    assert payload.endswith(remote.END_MARK + "\n")
    assert "export PYHOROVOD_SECRET=abc123\n" in payload
    with pytest.raises(ValueError, match="cannot be exported"):
        remote.stdin_payload({"BAD-NAME": "1"})


def test_remote_wrapper_sets_environment_and_stops_rank_when_stdin_closes(tmp_path):
    # Runs the exact remote command with sh (as ssh would), then closes its stdin as a dying launcher would.
    script = tmp_path / "rank.py"
    script.write_text("import os, sys, time\nprint(os.getpid(), os.environ['MY_VAR'], repr(sys.stdin.read()),"
                      " flush=True)\ntime.sleep(30)\n")
    cmd = remote.remote_command(["python3", str(script)], str(tmp_path))
    proc = subprocess.Popen(["sh", "-c", cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        proc.stdin.write(remote.stdin_payload({"MY_VAR": "a b'c\nd", "PATH": os.environ["PATH"]}).decode())
        proc.stdin.flush()
        first = proc.stdout.readline().split(" ", 1)
        second = proc.stdout.readline()
        pid = int(first[0])
        assert first[1] + second == "a b'c\nd ''\n"
        assert pid_alive(pid)
        start = time.monotonic()
        proc.stdin.close()                       # EOF: the wrapper SIGTERMs the rank
        assert wait_gone([pid], 5) == []
        assert proc.wait(5) == 128 + signal.SIGTERM
        assert time.monotonic() - start < 3
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_remote_wrapper_passes_exit_code(tmp_path):
    # stdin stays open (as the launcher keeps it) until the rank has exited by itself.
    cmd = remote.remote_command(["sh", "-c", "exit 7"], str(tmp_path))
    proc = subprocess.Popen(["sh", "-c", cmd], stdin=subprocess.PIPE, start_new_session=True)
    try:
        proc.stdin.write(remote.stdin_payload({}))
        proc.stdin.flush()
        assert proc.wait(10) == 7
    finally:
        proc.stdin.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_mpirun_command_line():
    from pyhorovod.runner.mpi import mpirun_argv
    argv = mpirun_argv(4, [HostSpec("a", 2), HostSpec("b", 2)], ["PYHOROVOD_SECRET", "HOROVOD_CYCLE_TIME"],
                       ["python", "train.py"], network_interfaces=["eth1"], extra_args="--mca btl self,tcp",
                       as_root=True, output_dir="logs")
    assert argv == ["mpirun", "--allow-run-as-root", "-np", "4", "--bind-to", "none", "--map-by", "slot",
                    "--tag-output", "-H", "a:2,b:2", "--mca", "btl_tcp_if_include", "eth1",
                    "--mca", "oob_tcp_if_include", "eth1", "--output-filename", "logs",
                    "-x", "PYHOROVOD_SECRET", "-x", "HOROVOD_CYCLE_TIME", "--mca", "btl", "self,tcp",
                    "python", "train.py"]
    assert mpirun_argv(2, None, [], ["x"])[:8] == ["mpirun", "-np", "2", "--bind-to", "none", "--map-by", "slot",
                                                   "--tag-output"]
    assert "--oversubscribe" in mpirun_argv(2, None, [], ["x"])
