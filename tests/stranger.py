"""A stranger on the network, for tests/test_security.py: clients that misbehave at pyhorovod's ports.

Speaks just enough of the connection handshake (csrc/rendezvous/handshake.h) to be a convincing stranger:

    acceptor  -> connector : ServerHello  {magic u32, version u16, role u16, rank i32, reserved u32, nonce 16}
    connector -> acceptor  : ClientHello  {the same 32-byte layout, then mac_c (32 bytes)}
    acceptor  -> connector : ServerProof  {mac_s}
    mac_c = HMAC-SHA256(secret, "phv-client\\0" || len(context) || "\\0" || context || ServerHello || ClientHello[:32])

Context: "phv-store" for the rendezvous store, the store prefix ("phv/g0") for the ranks' mesh. With the
right secret (`authenticated_store`) the test can also send malformed store frames after the handshake:
request = magic "PHVQ" u32 | op u32 | body_len u32 | nkeys u32 | arg i64 | body (little-endian).
Every socket operation here has a timeout.
"""
import hashlib
import hmac
import os
import random
import socket
import struct
import time

MAGIC = 0x50485648
VERSION = 1
ROLE_STORE_SERVER, ROLE_STORE_CLIENT, ROLE_TRANSPORT = 1, 2, 3
STORE_CONTEXT = b"phv-store"
REQUEST_MAGIC = 0x51564850


def connect(host, port, timeout=5.0):
    s = socket.create_connection((host, port), timeout=timeout)
    s.settimeout(timeout)
    return s


def recv_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def closed_by_peer(s, timeout=12.0):
    """True when the peer closes (EOF or reset) within timeout, reading and discarding anything it sends."""
    s.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not s.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    return False


def hello(role, rank=-1, version=VERSION, magic=MAGIC):
    return struct.pack("<IHHiI", magic, version, role, rank, 0) + os.urandom(16)


def mac(secret, label, context, a, b):
    msg = label + b"\0" + str(len(context)).encode() + b"\0" + context + a + b
    return hmac.new(secret, msg, hashlib.sha256).digest()


def client_hello(secret, context, server_hello, role, rank=-1, **kw):
    prefix = hello(role, rank, **kw)
    return prefix + mac(secret, b"phv-client", context, server_hello, prefix)


def authenticated_store(host, port, secret):
    """A store connection that passed the handshake (needs the job's secret)."""
    s = connect(host, port)
    server = recv_exact(s, 32)
    ch = client_hello(secret, STORE_CONTEXT, server, ROLE_STORE_CLIENT)
    s.sendall(ch)
    proof = recv_exact(s, 32)
    assert hmac.compare_digest(proof, mac(secret, b"phv-server", STORE_CONTEXT, server, ch)), "bad server proof"
    return s


def store_frame(op, keys, value=b"", arg=0, magic=REQUEST_MAGIC, body_len=None):
    body = b"".join(struct.pack("<I", len(k)) + k for k in keys) + value
    n = len(body) if body_len is None else body_len
    return struct.pack("<IIIIq", magic, op, n, len(keys), arg) + body


# ------------------------------------------------------------------ the strangers

def wrong_secret(host, port, context, role):
    """A well-formed handshake with the wrong secret. Returns True if the acceptor closed on us."""
    s = connect(host, port)
    try:
        server = recv_exact(s, 32)
        s.sendall(client_hello(b"not-the-secret", context, server, role, rank=0))
        return closed_by_peer(s)
    finally:
        s.close()


def bad_hello(host, port, role, **kw):
    """A hello with a bad magic or version (and no valid proof). True if closed on us."""
    s = connect(host, port)
    try:
        recv_exact(s, 32)
        s.sendall(hello(role, 0, **kw) + os.urandom(32))
        return closed_by_peer(s)
    finally:
        s.close()


def garbage(host, port, rng, nbytes):
    """Random bytes, sometimes after a valid-looking magic; never waits more than a few seconds."""
    try:
        s = connect(host, port, timeout=3)
    except OSError:
        return
    try:
        data = rng.randbytes(nbytes)
        if rng.random() < 0.3:
            data = struct.pack("<IH", MAGIC, VERSION) + data
        s.sendall(data)
        if rng.random() < 0.5:
            s.settimeout(0.2)
            try:
                s.recv(64)
            except OSError:
                pass
    except OSError:
        pass
    finally:
        s.close()


class SlowLoris:
    """Connections that are opened and then say nothing (kept open until close())."""

    def __init__(self, host, port, count):
        self.socks = []
        for _ in range(count):
            try:
                self.socks.append(connect(host, port, timeout=3))
            except OSError:
                break

    def closed_by_peer(self, timeout):
        """How many of them the acceptor has closed within timeout (all are read concurrently)."""
        deadline = time.monotonic() + timeout
        closed = set()
        while time.monotonic() < deadline and len(closed) < len(self.socks):
            for i, s in enumerate(self.socks):
                if i in closed:
                    continue
                s.settimeout(0.01)
                try:
                    if not s.recv(4096):
                        closed.add(i)
                except socket.timeout:
                    pass
                except OSError:
                    closed.add(i)
            time.sleep(0.05)
        return len(closed)

    def close(self):
        for s in self.socks:
            s.close()


def fuzz(host, port, seconds, seed, max_bytes=4096):
    """Random connections with random bytes for `seconds` (bounded); returns the number made."""
    rng = random.Random(seed)
    deadline, n = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        garbage(host, port, rng, rng.randrange(0, max_bytes))
        n += 1
    return n
