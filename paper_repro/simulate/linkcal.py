"""Calibrate the link model: latency and bandwidth between two processes, measured by ping-pong.

Two local processes (gloo on CPU, nccl with ``device="cuda"`` and two GPUs) send a tensor back
and forth; half the round trip is one message. A small message gives the latency, a large one
the bandwidth: ``time(bytes) = latency + bytes / bandwidth``.
"""
from __future__ import annotations

import os
import socket
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .engine import Link


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pingpong(rank: int, port: int, sizes: list[int], reps: int, out_path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        results = []
        for nbytes in sizes:
            buf = torch.zeros(max(nbytes // 4, 1), dtype=torch.float32)
            best = float("inf")
            for r in range(reps + 1):
                dist.barrier()
                t0 = time.perf_counter()
                if rank == 0:
                    dist.send(buf, 1)
                    dist.recv(buf, 1)
                else:
                    dist.recv(buf, 0)
                    dist.send(buf, 0)
                if r:
                    best = min(best, (time.perf_counter() - t0) / 2)
            results.append(best)
        if rank == 0:
            with open(out_path, "w") as f:
                f.write(" ".join(repr(v) for v in results))
    finally:
        dist.destroy_process_group()


def measure_link(small: int = 4, large: int = 4 << 20, reps: int = 20) -> Link:
    """The link between two local processes (gloo): latency from a ``small``-byte message,
    bandwidth from the extra time of a ``large``-byte one (best of ``reps`` round trips each)."""
    if not 0 < small < large:
        raise ValueError(f"need 0 < small < large bytes, got small={small!r}, large={large!r}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "times")
        mp.start_processes(_pingpong, args=(_free_port(), [small, large], reps, out), nprocs=2,
                           start_method="spawn")
        with open(out) as f:
            t_small, t_large = (float(v) for v in f.read().split())
    bandwidth = (large - small) / max(t_large - t_small, 1e-12)
    return Link(latency=max(t_small - small / bandwidth, 0.0), bandwidth=bandwidth)
