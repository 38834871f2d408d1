"""Process group and failure handling (the counted messages are :mod:`.messages`).

Start-up follows ``torchrun``'s environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``, ``TORCHELASTIC_USE_AGENT_STORE``); the package launcher
(:mod:`paper_repro.distributed.launch`) sets the same variables, so one code path serves both.

Failures. Every blocking wait is bounded by the process group's ``timeout``. On top of that a
:class:`Watchdog` thread in each process

* bumps a heartbeat counter in the rendezvous store every second,
* checks an ``abort`` key; a stage that raises writes ``"stage K ... failed: ..."`` there
  (first writer wins), and the launcher writes it when a process dies (e.g. SIGKILL),
* declares a stage dead when its heartbeat has not moved for ``heartbeat_timeout`` seconds
  (covers a killed process on another node under ``torchrun``),

and when any of these fires it prints the message naming the failed stage and ends its own
process with exit status 3 (``EXIT_PEER_FAILED``). A stage's own error exits with status 1.

Start-up is bounded by ``init_timeout``: a stage that cannot reach the rendezvous store at
``MASTER_ADDR:MASTER_PORT``, or does not see every other stage join, raises
:class:`StartupError`; the worker prints it as one line (what it tried to reach, its rank, the
world size and the timeout; no traceback) and exits with status 1.
"""
from __future__ import annotations

import datetime
import os
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass

import torch
import torch.distributed as dist


EXIT_FAILED = 1
EXIT_PEER_FAILED = 3
ABORT_KEY = "abort"
NCCL_MARGIN_S = 60.0


class StartupError(RuntimeError):
    """This stage could not join its peers; the message says what it tried to reach (printed
    without a traceback)."""


class PeerFailed(RuntimeError):
    """Another stage failed (its message is this one) before this stage's watchdog started."""


@dataclass
class Context:
    rank: int
    world: int
    local_rank: int
    device: torch.device
    backend: str
    store: dist.Store           # our own namespace in the rendezvous store
    watchdog: "Watchdog"
    timeout: float

    @property
    def poll_timeout(self) -> float | None:
        """For our own messages: on CUDA the host polls their completion for at most the message
        timeout (NCCL's wait returns at once; see :mod:`.messages`); gloo's wait blocks by itself."""
        return self.timeout if self.device.type == "cuda" else None

    def progress(self, n: int = 1) -> None:
        """Tell the launcher's progress bar that ``n`` more micro-batches are done (rank 0 only)."""
        if self.rank == 0:
            self.store.add("progress", n)


def _env_int(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise ValueError(f"environment variable {name} is not set: start the workers with torchrun "
                             f"or paper_repro.distributed.launch")
        return default
    return int(value)


def _store_client(host: str, port: int, timeout: float) -> dist.TCPStore:
    return dist.TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=timeout))


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def connect_store(host: str, port: int, rank: int, world: int, host_it: bool, seconds: float) -> dist.TCPStore:
    """The rendezvous store at ``host:port``: hosted here (``host_it``), else reached within
    ``seconds``, or :class:`StartupError` naming the address, rank, world size and timeout.

    The address is probed with plain sockets first: TCPStore's own connect loop takes up to
    twice its timeout and prints a C++ stack trace per failed try."""
    where = f"{host}:{port} (MASTER_ADDR:MASTER_PORT)"
    who = f"stage {rank} (rank {rank} of world size {world})"
    td = datetime.timedelta(seconds=seconds)
    if host_it:
        try:
            return dist.TCPStore(host, port, world, is_master=True, timeout=td, wait_for_workers=False)
        except RuntimeError as err:
            raise StartupError(f"{who} could not host the rendezvous store on {where}: {_first_line(err)}") from None
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.05, min(1.0, left))):
                break
        except OSError as err:
            last = err
        if time.monotonic() + 0.2 > deadline:
            raise StartupError(f"{who} could not reach the rendezvous store at {where} within the start-up "
                               f"timeout of {seconds:g} s (last error: {last}); is stage 0 (or torchrun) "
                               f"running there? Raise --init-timeout if it starts later") from None
        time.sleep(0.2)
    try:
        return dist.TCPStore(host, port, world, is_master=False, wait_for_workers=False,
                             timeout=datetime.timedelta(seconds=max(1.0, deadline - time.monotonic())))
    except RuntimeError as err:
        raise StartupError(f"{who} could not connect to the rendezvous store at {where} within the start-up "
                           f"timeout of {seconds:g} s: {_first_line(err)}") from None


def init(device: str = "cpu", timeout: float = 300.0, heartbeat_timeout: float = 30.0,
         init_timeout: float = 300.0) -> Context:
    """Join the process group (gloo on CPU, nccl on CUDA) and start the watchdog.

    ``init_timeout`` bounds reaching the rendezvous store and every stage joining it;
    ``timeout`` bounds each message afterwards (and the process group's own connections)."""
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    local_rank = _env_int("LOCAL_RANK", rank)
    host, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), _env_int("MASTER_PORT")
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "False") == "True"
    # NCCL's own watchdog times a message from when it was posted, the host's poll from when it is
    # needed (a receive is posted one micro-batch ahead): its limit sits a margin above the
    # message timeout, so that the poll, which names the peer, fires first
    td = datetime.timedelta(seconds=timeout + (NCCL_MARGIN_S if device == "cuda" else 0.0))
    base = connect_store(host, port, rank, world, rank == 0 and not agent_store, init_timeout)
    base.set_timeout(datetime.timedelta(seconds=max(timeout, 300.0)))  # store reads (e.g. a measured split)
    run_id = f"{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    store = dist.PrefixStore(f"paper_repro/{run_id}/", base)
    if device == "cuda":
        try:
            dev, backend = cuda_device(local_rank), "nccl"
        except ValueError as err:       # the other stages stop at once instead of waiting to meet
            report_failure(store, f"stage {rank} failed: {err}")
            raise
    else:
        dev, backend = torch.device("cpu"), "gloo"
    _wait_for_everyone(store, rank, world, f"{host}:{port}", init_timeout)
    try:  # the group's timeout is the message timeout; it also bounds connecting to the peers
        dist.init_process_group(backend, store=dist.PrefixStore("pg/", store), rank=rank, world_size=world,
                                timeout=td)
    except RuntimeError as err:
        if store.check([ABORT_KEY]):
            raise PeerFailed(store.get(ABORT_KEY).decode()) from None
        raise StartupError(f"stage {rank} (rank {rank} of world size {world}) could not set up the {backend} "
                           f"process group with its peers (rendezvous {host}:{port}) within {timeout:g} s: "
                           f"{_first_line(err)}") from None
    watchdog = Watchdog(rank, world, host, port, f"paper_repro/{run_id}/", heartbeat_timeout, timeout)
    watchdog.start()
    if backend == "nccl":   # NCCL builds the whole group's communicator lazily, at its first use by
        dist.barrier(device_ids=[local_rank])      # every rank; torch's batched sends need it: build it now
    return Context(rank, world, local_rank, dev, backend, store, watchdog, timeout)


def cuda_device(local_rank: int) -> torch.device:
    """The GPU of the stage process with ``local_rank`` (``cuda:LOCAL_RANK``), made current."""
    if not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but torch.cuda.is_available() is False")
    visible = torch.cuda.device_count()
    if local_rank >= visible:
        raise ValueError(f"the stage process with LOCAL_RANK {local_rank} takes cuda:{local_rank}, but this "
                         f"process sees {visible} GPU(s) (CUDA_VISIBLE_DEVICES="
                         f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')!r}): let every process of a node "
                         "see all of the node's GPUs")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def settle(device: torch.device) -> None:
    """Wait until this process's own computation on ``device`` has finished (nothing on a CPU).
    Only the current stream is waited for: a receive already posted for the next micro-batch
    runs on NCCL's stream and must not hold this one up (``torch.cuda.synchronize`` would wait
    for it too, and with it for the sending stage)."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


def _wait_for_everyone(store: dist.Store, rank: int, world: int, where: str, seconds: float) -> None:
    """Meet every stage in the store within ``seconds``; stop at once if the launcher (or a
    peer) has already recorded a failure."""
    keys = [f"joined/{r}" for r in range(world)]
    store.set(keys[rank], "1")
    deadline = time.monotonic() + seconds
    while True:
        if store.check([ABORT_KEY]):
            raise PeerFailed(store.get(ABORT_KEY).decode())
        if store.check(keys):
            return
        if time.monotonic() > deadline:
            names = ", ".join(str(r) for r, key in enumerate(keys) if not store.check([key]))
            message = (f"stage {rank} (rank {rank} of world size {world}) waited {seconds:g} s (the start-up "
                       f"timeout) at the rendezvous store {where}, but stage(s) "
                       f"{names} never joined; start every stage with the same MASTER_ADDR, MASTER_PORT and "
                       f"WORLD_SIZE, or raise --init-timeout")
            report_failure(store, message)
            raise StartupError(message)
        time.sleep(0.05)


class Watchdog(threading.Thread):
    """Heartbeats plus the abort check; ends this process when another stage has failed."""

    def __init__(self, rank: int, world: int, host: str, port: int, prefix: str,
                 heartbeat_timeout: float, timeout: float, interval: float = 0.2):
        super().__init__(name=f"watchdog-{rank}", daemon=True)
        self.rank, self.world, self.interval = rank, world, interval
        self.heartbeat_timeout = heartbeat_timeout
        self.store = dist.PrefixStore(prefix, _store_client(host, port, min(timeout, 30.0)))
        self.finished = threading.Event()

    def run(self) -> None:
        last_seen: dict[int, tuple[int, float]] = {}
        next_beat = 0.0
        while not self.finished.is_set():
            try:
                now = time.monotonic()
                if now >= next_beat:
                    self.store.add(f"hb/{self.rank}", 1)
                    next_beat = now + 1.0
                    for peer in range(self.world):
                        if peer == self.rank or self.store.check([f"done/{peer}"]):
                            continue
                        count = self.store.add(f"hb/{peer}", 0)
                        if peer not in last_seen or last_seen[peer][0] != count:
                            last_seen[peer] = (count, now)
                        elif now - last_seen[peer][1] > self.heartbeat_timeout:
                            report_failure(self.store, f"stage {peer} stopped responding: no heartbeat for "
                                                       f"{now - last_seen[peer][1]:.0f} s (killed or hung)")
                if self.store.check([ABORT_KEY]):
                    self.exit_peer_failed(self.store.get(ABORT_KEY).decode())
            except Exception as err:  # the store itself is gone: the launcher or rank-0 host died
                if self.finished.is_set():
                    return
                self.exit_peer_failed(f"lost the rendezvous store ({type(err).__name__}: {err}); "
                                      f"the launcher or the process hosting it has died")
            self.finished.wait(self.interval)

    def exit_peer_failed(self, message: str) -> None:
        print(f"[stage {self.rank}] stopping because {message}", file=sys.stderr, flush=True)
        os._exit(EXIT_PEER_FAILED)

    def wait_for_abort(self, seconds: float) -> str | None:
        """The abort message if one appears within ``seconds`` (used after a failed message)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if self.store.check([ABORT_KEY]):
                    return self.store.get(ABORT_KEY).decode()
            except Exception:
                return None
            time.sleep(0.1)
        return None


def report_failure(store: dist.Store, message: str) -> str:
    """Record ``message`` as the reason for stopping unless an earlier failure was recorded;
    returns the message that won."""
    return store.compare_set(ABORT_KEY, "", message).decode()


def peer_may_have_died(err: BaseException) -> bool:
    """A message failed because the other side went away (not a timeout, not our own bug)."""
    text = str(err)
    return any(key in text for key in ("Connection closed by peer", "Connection reset", "Broken pipe",
                                       "closed by peer", "ECONNRESET", "NCCL communicator was aborted",
                                       "ncclRemoteError", "remote process exited"))


def handle_exception(ctx: Context | None, err: BaseException) -> int:
    """Turn an exception in a stage into an exit status, naming the stage that failed first."""
    rank = ctx.rank if ctx is not None else os.environ.get("RANK", "?")
    if isinstance(err, PeerFailed):
        print(f"[stage {rank}] stopping because {err}", file=sys.stderr, flush=True)
        return EXIT_PEER_FAILED
    if isinstance(err, StartupError):  # one line, no traceback: the message says it all
        print(f"error: {err}", file=sys.stderr, flush=True)  # the message names the stage
        return EXIT_FAILED
    if ctx is not None and peer_may_have_died(err):
        # the other side went away: give the launcher / the heartbeats time to say who it was
        culprit = ctx.watchdog.wait_for_abort(ctx.watchdog.heartbeat_timeout + 5.0)
        if culprit is not None:
            print(f"[stage {rank}] stopping because {culprit}", file=sys.stderr, flush=True)
            return EXIT_PEER_FAILED
    message = f"stage {rank} failed: {type(err).__name__}: {err}".strip()
    traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
    if ctx is not None:
        try:
            winner = report_failure(ctx.store, message)
        except Exception:
            winner = message
        if winner != message:
            print(f"[stage {rank}] stopping because {winner}", file=sys.stderr, flush=True)
            return EXIT_PEER_FAILED
    print(f"[stage {rank}] {message}", file=sys.stderr, flush=True)
    return EXIT_FAILED


def finish(ctx: Context) -> None:
    """Mark this stage done (peers stop watching its heartbeat), then meet everyone."""
    ctx.store.set(f"done/{ctx.rank}", "1")
    dist.barrier()


def shutdown(ctx: Context) -> None:
    ctx.watchdog.finished.set()
    dist.destroy_process_group()
