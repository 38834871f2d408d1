"""Start one worker process per stage on this machine, the way ``torchrun`` does.

:func:`launch` hosts the rendezvous store itself (on a free port), starts
``python -m paper_repro.distributed.run`` once per stage with torchrun's environment
variables, shows a progress bar, and watches the processes. When one exits with an error or is
killed, it records which stage failed in the store (unless the stage already did so itself),
the others stop within a second and name it, and :func:`launch` raises :class:`PipelineError`
naming the failed stage. Anything still running ``grace`` seconds after a failure, or after
``timeout``, is killed. Ctrl-C or SIGTERM to the launcher kills every stage process at once
and re-raises (as ``KeyboardInterrupt``, see :mod:`paper_repro.signals`).
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from .. import signals
from .comm import ABORT_KEY, EXIT_PEER_FAILED, report_failure
from .config import PipelineConfig
from .training import STOP_REQUEST


class PipelineError(RuntimeError):
    """A pipeline run failed; ``failed_stage``, ``exit_codes`` and ``logs`` (text per stage) say how."""

    def __init__(self, message: str, failed_stage: int | None, exit_codes: list[int | None], logs: list[str]):
        super().__init__(message)
        self.failed_stage, self.exit_codes, self.logs = failed_stage, exit_codes, logs


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def check_gpus(processes: int) -> None:
    """Each local stage process takes its own GPU (``cuda:LOCAL_RANK``): fail before starting any
    when this machine has fewer, naming both counts."""
    if not torch.cuda.is_available():
        raise ValueError("device 'cuda' asked for, but torch.cuda.is_available() is False on this machine")
    visible = torch.cuda.device_count()
    if processes > visible:
        raise ValueError(f"{processes} stage processes on device 'cuda' need {processes} GPUs here (each takes "
                         f"cuda:LOCAL_RANK), {visible} visible: use fewer stages, or spread them over nodes "
                         "with torchrun")


@signals.sigterm_as_interrupt()  # SIGTERM takes the Ctrl-C path: the finally below kills every stage
def launch(configs: list[PipelineConfig], *, timeout: float | None = None, grace: float = 60.0,
           progress: bool = True, keep_logs: bool = False, report_exits: bool = True,
           training=None) -> list[dict]:
    """Run ``configs`` (same ``stages``, ``dp`` and ``device``) in ``stages * dp`` local processes; returns
    one record per config (see ``run.summarize``). Raises PipelineError on any failure.

    ``report_exits=False`` leaves naming a dead process to the stages' own heartbeats (what
    happens on other nodes under torchrun); the tests use it to exercise that path. The stages'
    logs are in ``PipelineError.logs``; ``keep_logs=True`` also keeps the files of a failed run
    (named in the message). On Ctrl-C or SIGTERM the ``KeyboardInterrupt`` goes on with
    ``partial_records``: the records of the configs that had finished.

    ``training`` (a :class:`.fields.TrainingFields`): the stages train each config in turn
    (see :mod:`.training`). Ctrl-C or SIGTERM then first asks every stage to stop after a common
    step (writing a checkpoint where one is configured) and waits up to ``grace`` seconds for
    them; ``partial_records`` holds the interrupted run's result."""
    configs = _checked(configs)
    nprocs = configs[0].processes
    workdir = Path(tempfile.mkdtemp(prefix="paper_repro_pipeline_"))
    (workdir / "configs.json").write_text(json.dumps([c.to_dict() for c in configs]))
    if training is not None:
        (workdir / "training.json").write_text(json.dumps(training.to_dict()))
    result_path = workdir / "result.json"
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=30))
    store = dist.PrefixStore("paper_repro/run/0/", master)
    env = _environment(master.port, nprocs, configs[0].device)
    cmd = [sys.executable, "-m", "paper_repro.distributed.run", "--configs", str(workdir / "configs.json"),
           "--json", str(result_path), "--quiet", "--partial", str(workdir / "partial.json")]
    if training is not None:
        cmd += ["--training", str(workdir / "training.json")]
    procs, logs = [], []
    try:
        for rank in range(nprocs):
            log = open(workdir / f"stage{rank}.log", "w")
            logs.append(log)
            procs.append(subprocess.Popen(cmd, env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        codes = _watch(procs, store, sum(c.total_micro_batches for c in configs), timeout, grace, progress,
                       report_exits)
    except KeyboardInterrupt as stop:
        if training is not None and procs:      # the stages stop after a common step, then exit
            store.compare_set(STOP_REQUEST, "", "interrupted")
            _wait(procs, grace)
        _kill(procs)
        for p in procs:
            p.wait()
        stop.partial_records = _finished(workdir / "partial.json")
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    texts = [(workdir / f"stage{r}.log").read_text(errors="replace") for r in range(nprocs)]
    failed_run = any(code != 0 for code in codes)
    records = None if failed_run else json.loads(result_path.read_text())
    keep = keep_logs and failed_run
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    if failed_run:
        reason = store.get(ABORT_KEY).decode() if store.check([ABORT_KEY]) else "unknown failure"
        raise _failure(reason, codes, texts, workdir if keep else None)
    return records


def _checked(configs: list[PipelineConfig]) -> list[PipelineConfig]:
    """``configs`` validated, after checking that one launch can run them all (the same
    stages, dp and device; enough GPUs for a cuda run)."""
    if not configs:
        raise ValueError("launch needs at least one PipelineConfig")
    configs = [c.validate() for c in configs]
    if any((c.stages, c.dp) != (configs[0].stages, configs[0].dp) for c in configs):
        raise ValueError("all configs of one launch must have the same stages and dp")
    if any(c.device != configs[0].device for c in configs):
        raise ValueError("all configs of one launch must have the same device")
    if configs[0].device == "cuda":
        check_gpus(configs[0].processes)
    return configs


def _environment(port: int, nprocs: int, device: str) -> dict:
    """The stage processes' environment: torchrun's variables for one local group on the
    launcher's store at ``port`` (none of an enclosing torchrun's), one thread each on CPU."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "WORLD_SIZE": str(nprocs), "LOCAL_WORLD_SIZE": str(nprocs), "TORCHELASTIC_USE_AGENT_STORE": "True",
           "PYTHONUNBUFFERED": "1"}
    env.pop("TORCHELASTIC_RUN_ID", None)
    env.pop("TORCHELASTIC_RESTART_COUNT", None)
    if device == "cpu":
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _failure(reason: str, codes: list, texts: list[str], kept: Path | None) -> PipelineError:
    """The error of a failed launch: ``reason``, the first stage that failed on its own (not
    because a peer did), and each stage's exit and last log lines (with its file in ``kept``)."""
    failed = next((r for r, c in enumerate(codes) if c not in (0, EXIT_PEER_FAILED)), None)

    def tail(r, code, text):
        status = _describe_exit(code) if code is not None else "not started"
        where = f" {kept / f'stage{r}.log'}" if kept is not None else ""
        return f"--- stage {r} ({status}), last lines of its log{where}:\n" + "\n".join(
            text.strip().splitlines()[-8:])

    tails = "\n".join(tail(r, c, t) for r, (c, t) in enumerate(zip(codes, texts)))
    return PipelineError(f"pipeline failed: {reason}\n{tails}", failed, codes, texts)


def _wait(procs, seconds: float) -> None:
    """Wait up to ``seconds`` for every process to exit."""
    deadline = time.monotonic() + seconds
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.1)


def _finished(path: Path) -> list[dict]:
    """The records rank 0 had written when the launch stopped (none if it wrote none)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return []


def _watch(procs, store, total: int, timeout: float | None, grace: float, progress: bool,
           report_exits: bool) -> list[int | None]:
    start = time.monotonic()
    failed_at = None
    bar = tqdm(total=total, desc=f"pipeline x{len(procs)} processes", unit="mb", disable=not progress,
               leave=False, mininterval=0.5)
    try:
        while True:
            codes = [p.poll() for p in procs]
            for rank, code in enumerate(codes):
                if code not in (None, 0) and failed_at is None:
                    failed_at = time.monotonic()
                    if report_exits:
                        report_failure(store, f"stage {rank} (pid {procs[rank].pid}) {_describe_exit(code)}")
            if all(c is not None for c in codes):
                return codes
            now = time.monotonic()
            if failed_at is not None and now - failed_at > grace:
                _kill(procs)
            elif timeout is not None and now - start > timeout and failed_at is None:
                failed_at = now
                report_failure(store, f"the launcher's timeout of {timeout:.0f} s ran out")
                grace = min(grace, 10.0)
            try:
                done = store.add("progress", 0)
                bar.update(done - bar.n)
            except Exception:  # progress is cosmetic
                pass
            time.sleep(0.1)
    finally:
        bar.close()


def _kill(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
