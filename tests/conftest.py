import os
import socket

import pytest
import torch

# Tests use tiny models on a 2-core machine: one intra-op thread is faster and steadier.
torch.set_num_threads(1)
os.environ.setdefault("MPLBACKEND", "Agg")


FAULT_ENV = "PAPER_REPRO_TEST_FAULT"
FAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_injection")


def inject_fault(monkeypatch, spec: str) -> None:
    """Stage processes started from now on fail as ``spec`` says (``MODE@RANK:STEP``, see
    tests/fault_injection/sitecustomize.py): they inherit the variable and the folder on PYTHONPATH."""
    monkeypatch.setenv(FAULT_ENV, spec)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (FAULT_PATH, os.environ.get("PYTHONPATH")) if p))


@pytest.fixture
def free_port():
    """A localhost TCP port nobody else can be handed while the test runs.

    Binding port 0, closing the socket and passing the number on races: until the child binds
    it, any process (another pytest worker) binding port 0 may be given the same port. Here the
    socket stays bound, with SO_REUSEADDR and never listening, until the test ends: the kernel
    hands a bound port to no other bind(0) or outgoing connection, while a server that also sets
    SO_REUSEADDR may bind and listen on it (Linux refuses a shared port only to a second
    listener). torch's TCPStore (libuv and legacy, so torchrun's c10d rendezvous and
    MASTER_PORT) and JupyterLab (tornado) all set it; a server that does not fails at once with
    EADDRINUSE, never now and then. Until the server listens, a connection to the port is
    refused, exactly as on a free port."""
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]
