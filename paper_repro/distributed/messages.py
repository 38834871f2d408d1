"""Counted point-to-point messages between stages: non-blocking sends with a bound on how
many are outstanding (back-pressure), pre-posted receives, and the bytes of every tensor sent
or received. Every wait is bounded by the process group's timeout and fails naming the peer.

gloo's ``wait`` blocks the host until the message has gone through. NCCL's only orders the
GPU's stream after it and returns at once, so there (``poll_timeout`` given) the host polls the
message's completion itself, for at most that long: the sender's bound then holds, a receive
wait is a real wait, and a peer that never answers is named. Only these messages poll; the
process group keeps NCCL's defaults, so torch's own schedules wait as they always do."""
from __future__ import annotations

import collections
import time

import torch
import torch.distributed as dist


SPIN_S = 0.002      # polling a message: how long to spin before sleeping between polls


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _wait(work, what: str, poll_timeout: float | None = None) -> None:
    """``work.wait()`` (bounded by the process group's timeout) with an error naming the peer;
    with ``poll_timeout``, first poll on the host until the message has completed."""
    if poll_timeout is not None:
        start = time.monotonic()
        while not work.is_completed():
            waited = time.monotonic() - start
            if waited > poll_timeout:
                raise RuntimeError(f"{what} failed: not done after {poll_timeout:g} s (the message timeout)")
            # a short wait is answered at once; a long one (a pipeline bubble) sleeps in 0.1 ms
            # steps instead of keeping a core busy. Either lets the heartbeat thread run.
            time.sleep(0 if waited < SPIN_S else 1e-4)
    try:
        work.wait()
    except RuntimeError as err:
        raise RuntimeError(f"{what} failed: {err}") from err


class Sender:
    """Non-blocking sends to one peer, at most ``max_in_flight`` messages outstanding; counts bytes.

    gloo completes a send when the receiver has taken it, so the bound is back-pressure: the
    sender runs at most ``max_in_flight`` micro-batches ahead of its receiver."""

    def __init__(self, dst: int, max_in_flight: int = 2, tag_base: int = 0, poll_timeout: float | None = None):
        self.dst, self.max_in_flight, self.tag_base = dst, max_in_flight, tag_base
        self.poll_timeout = poll_timeout
        self.pending: collections.deque = collections.deque()
        self.bytes = collections.Counter()
        self.wait_time = 0.0

    def make_room(self) -> None:
        """Wait until fewer than ``max_in_flight`` messages are outstanding (:meth:`send` does
        this first; a caller that times its sends apart from their waits calls it before)."""
        while len(self.pending) >= self.max_in_flight:
            self._wait_oldest()

    def send(self, tensors: dict[str, torch.Tensor]) -> None:
        """Send each tensor (in order, tag = position); ``tensors`` keys name the byte counters."""
        self.make_room()
        works = []
        for tag, (name, t) in enumerate(tensors.items()):
            t = t.detach().contiguous()
            works.append((dist.isend(t, self.dst, tag=self.tag_base + tag), t))
            self.bytes[name] += nbytes(t)
        self.pending.append(works)

    def _wait_oldest(self) -> None:
        t0 = time.perf_counter()
        for work, _ in self.pending.popleft():
            _wait(work, f"sending to stage {self.dst}", self.poll_timeout)
        self.wait_time += time.perf_counter() - t0

    def flush(self) -> None:
        while self.pending:
            self._wait_oldest()


class Receiver:
    """Receives from one peer; with ``prepost`` the next message is already posted while the
    current one is used (double buffering). NCCL ignores tags and matches messages between two
    ranks in the order they are posted, so a receiver that shares its peer with other traffic
    (the baselines' labels) must not pre-post."""

    def __init__(self, src: int, specs: dict[str, tuple[tuple, torch.dtype]], device: torch.device,
                 count: int, tag_base: int = 0, prepost: bool = True, poll_timeout: float | None = None):
        self.src, self.specs, self.device, self.remaining = src, specs, device, count
        self.tag_base, self.prepost, self.poll_timeout = tag_base, prepost, poll_timeout
        self.bytes = collections.Counter()
        self.wait_time = 0.0
        self.posted = self._post() if count > 0 and prepost else None

    def _post(self):
        if self.remaining <= 0:
            raise RuntimeError(f"Receiver: no message left to receive from stage {self.src}")
        self.remaining -= 1
        out = {}
        for tag, (name, (shape, dtype)) in enumerate(self.specs.items()):
            buf = torch.empty(shape, dtype=dtype, device=self.device)
            out[name] = (dist.irecv(buf, self.src, tag=self.tag_base + tag), buf)
        return out

    def recv(self) -> dict[str, torch.Tensor]:
        t0 = time.perf_counter()
        current = self.posted if self.prepost else self._post()
        if current is None:
            raise RuntimeError(f"Receiver: no message left to receive from stage {self.src}")
        for name, (work, buf) in current.items():
            _wait(work, f"receiving {name} from stage {self.src}", self.poll_timeout)
            self.bytes[name] += nbytes(buf)
        self.wait_time += time.perf_counter() - t0
        if self.prepost:
            self.posted = self._post() if self.remaining > 0 else None
        return {name: buf for name, (_, buf) in current.items()}

    def drain(self) -> None:
        """Take the message already posted, if any, and post no other (a run that stops early: its
        sender sends one last message for the receive posted ahead)."""
        self.remaining = 0
        if self.posted is not None:
            self.recv()

