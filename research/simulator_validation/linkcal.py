"""Calibrate the link model: latency and bandwidth between two processes, measured the way a
pipeline uses the link.

Two local processes (gloo on CPU, NCCL between two GPUs) repeatedly compute for ``compute_s``
seconds and then exchange a tensor, each sending one and receiving one in a single batch of
point-to-point operations (as ``torch.distributed.pipelining``'s 1F1B does). The time from
posting the batch to its completion is one message. A small message gives the latency, a large
one the bandwidth:
``time(bytes) = latency + bytes / bandwidth``.

The compute between messages matters. A process that blocks on a receive leaves its core idle,
and on a virtual machine waking it again can take milliseconds; back-to-back ping-pong never
idles and measures only the best case (on this project's 2-core machine 0.07-0.2 ms per
message against 1.9-3.0 ms after 10 ms of compute; docs/simulate.md). ``compute_s=0`` gives
that ping-pong figure. The mean over rounds is kept, not the best: a pipeline pays the slow wake-ups too.
"""
from __future__ import annotations

import os
import socket
import statistics
import tempfile
import time
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from paper_repro.distributed.timing import synchronize
from paper_repro.simulate.engine import Link

COMPUTE_S = 0.01     # about one micro-batch's work per stage in this project's CPU benchmarks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _busy(seconds: float, work: torch.Tensor) -> None:
    """Keep this core computing for ``seconds`` (matrix products, as a stage would)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        work @ work


def _exchange(rank: int, port: int, sizes: list[int], reps: int, compute_s: float, out_path: str,
              device: str = "cpu") -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    if device == "cuda":            # one GPU per process, as the pipeline's stages; NCCL
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
    else:
        dev = torch.device("cpu")
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=rank, world_size=2)
    peer = 1 - rank
    work = torch.randn(256, 256, device=dev)
    try:
        results = []
        for nbytes in sizes:
            send = torch.zeros(max(nbytes // 4, 1), dtype=torch.float32, device=dev)
            recv = torch.empty_like(send)
            times = []
            dist.barrier(device_ids=[rank] if dev.type == "cuda" else None)
            for r in range(reps + 1):
                _busy(compute_s, work)
                synchronize(dev)                # the compute is done before the message starts
                t0 = time.perf_counter()
                works = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, peer),
                                                dist.P2POp(dist.irecv, recv, peer)])
                for w in works:
                    w.wait()
                synchronize(dev)                # NCCL's wait returns before the message is through
                if r:                       # the first round is a warm-up
                    times.append(time.perf_counter() - t0)
            results.append(statistics.fmean(times))
        with open(f"{out_path}.{rank}", "w") as f:
            f.write(" ".join(repr(v) for v in results))
    finally:
        dist.destroy_process_group()


def measure_link(small: int = 4, large: int | None = None, reps: int = 30, compute_s: float = COMPUTE_S,
                 device: str = "cpu") -> Link:
    """The link between two local processes (gloo on ``cpu``; NCCL between GPUs 0 and 1 on
    ``cuda``): latency from a ``small``-byte message, bandwidth from the extra time of a
    ``large``-byte one (default 4 MiB, 256 MiB between GPUs); each the mean of ``reps``
    exchanges (both processes) made after ``compute_s`` seconds of compute."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if large is None:       # GPUs move 4 MiB in about the time of a small message: measure with more
        large = (256 if device == "cuda" else 4) << 20
    if device == "cuda" and torch.cuda.device_count() < 2:
        raise ValueError(f"measuring the link on cuda needs 2 GPUs (one per process), "
                         f"{torch.cuda.device_count()} visible")
    if not 0 < small < large:
        raise ValueError(f"need 0 < small < large bytes, got small={small!r}, large={large!r}")
    if not compute_s >= 0:
        raise ValueError(f"compute_s must be >= 0 seconds, got {compute_s!r}")
    if not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be a positive integer, got {reps!r}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "times")
        mp.start_processes(_exchange, args=(_free_port(), [small, large], reps, compute_s, out, device),
                           nprocs=2, start_method="spawn")
        per_rank = []
        for rank in range(2):
            with open(f"{out}.{rank}") as f:
                per_rank.append([float(v) for v in f.read().split()])
    t_small, t_large = (statistics.fmean(col) for col in zip(*per_rank))
    if t_large <= t_small:      # the noise of the latency is larger than the time of the bytes
        warnings.warn(f"the link's {large} B messages took no longer than its {small} B ones ({t_large * 1e6:.1f} "
                      f"against {t_small * 1e6:.1f} us): bytes taken as free (bandwidth inf), latency "
                      "as the mean of both; a larger message measures the bandwidth", stacklevel=2)
        return Link(latency=(t_small + t_large) / 2, bandwidth=float("inf"))
    bandwidth = (large - small) / (t_large - t_small)
    return Link(latency=max(t_small - small / bandwidth, 0.0), bandwidth=bandwidth)
