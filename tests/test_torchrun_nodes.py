"""The local pipeline across two torchrun nodes on this machine: two launchers
(``python -m paper_repro.distributed.torchrun`` or plain ``torchrun``, ``--nnodes 2 --nproc-per-node 1``,
c10d rendezvous on localhost), one stage each. The stages end exactly where the single-process
learner ends (1F1B: where backprop ends); a node that dies ends the other with an error naming its
stage; a node that never arrives ends the first within the rendezvous timeout, in one line."""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
import torch.distributed as dist

from paper_repro.distributed.arguments import add_arguments
from paper_repro.distributed.options import configs_from_args
from test_distributed import backprop_reference, local_reference

REPO = Path(__file__).resolve().parent.parent
TORCHRUN = [sys.executable, "-m", "paper_repro.distributed.torchrun"]
PLAIN_TORCHRUN = [str(Path(sys.executable).with_name("torchrun"))]
# test_distributed's MLP: 5 blocks, cut after block 3 (greedy: modules 0-2 | 3-4)
MODEL = ["--model", "mlp", "--model-kwargs", '{"depth": 5, "width": 32}', "--image-size", "6", "--stages", "2",
         "--threads", "1", "--timeout", "60", "--init-timeout", "60"]
LOCAL = MODEL + ["--schedule", "local", "--method", "greedy", "--cut-at", "3", "--micro-batch", "4",
                 "--micro-batches", "3", "--steps", "1", "--warmup-steps", "1"]
ONE_F_ONE_B = MODEL + ["--schedule", "1f1b", "--optimizer", "sgd", "--lr", "0.1", "--cut", "flops",
                       "--micro-batch", "4", "--micro-batches", "4", "--steps", "1", "--warmup-steps", "1"]


def _config(worker_args):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    [cfg] = configs_from_args(parser.parse_args(worker_args))   # what every stage process builds
    return cfg


class Nodes:
    """Launchers started as the nodes of one torchrun job, each in its own session; on exit every
    process of every node (launcher and the stage processes it started) is killed."""

    def __init__(self, tmp: Path, port: int, launcher=TORCHRUN, join_timeout: float = 60):
        self.tmp, self.launcher, self.port = tmp, launcher, port
        self.join_timeout = join_timeout
        self.procs: list[subprocess.Popen] = []
        self.family: dict[int, set[int]] = {}

    def start(self, node_rank: int, worker_args) -> subprocess.Popen:
        cmd = [*self.launcher, "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node_rank),
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"localhost:{self.port}", "--rdzv-id", "test",
               "--rdzv-conf", f"join_timeout={self.join_timeout:g}", "--monitor-interval", "0.1",
               "-m", "paper_repro.distributed.run", *worker_args]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "MASTER_", "RANK"))}
        env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        with open(self.log(node_rank), "w") as out:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.procs.append(proc)
        return proc

    def start_both(self, worker_args) -> None:
        """Node 0 first, node 1 once node 0 hosts the rendezvous (node 0 then also takes rank 0)."""
        first = self.start(0, worker_args)
        deadline = time.monotonic() + 60
        while True:
            assert first.poll() is None, self.output(0)
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "node 0 never hosted the rendezvous"
                time.sleep(0.1)
        self.start(1, worker_args)

    def log(self, node_rank: int) -> Path:
        return self.tmp / f"node{node_rank}.log"

    def output(self, node_rank: int) -> str:
        return self.log(node_rank).read_text(errors="replace")

    def stage_process(self, node_rank: int, seconds: float = 120) -> psutil.Process:
        """The stage process torchrun started on ``node_rank`` (in a session of its own)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.procs[node_rank].poll() is None, self.output(node_rank)
            for child in psutil.Process(self.procs[node_rank].pid).children(recursive=True):
                try:
                    if "paper_repro.distributed.run" in child.cmdline():
                        self.family.setdefault(node_rank, set()).add(child.pid)
                        return child
                except psutil.NoSuchProcess:
                    pass
            time.sleep(0.1)
        raise AssertionError(f"node {node_rank} started no stage process within {seconds} s")

    def wait(self, seconds: float) -> list[int]:
        deadline = time.monotonic() + seconds
        return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in self.procs]

    def kill_node(self, node_rank: int) -> None:
        """SIGKILL every process of the node: the launcher's group and the stage processes."""
        proc = self.procs[node_rank]
        pids = set(self.family.get(node_rank, ()))
        try:
            pids |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            pass
        for pid in pids:
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for rank in range(len(self.procs)):
            self.kill_node(rank)


def _two_nodes(tmp_path, port, worker_args, launcher=TORCHRUN) -> Path:
    out = tmp_path / "params"
    with Nodes(tmp_path, port, launcher) as nodes:
        nodes.start_both([*worker_args, "--save-params", str(out), "--json", str(tmp_path / "run.json")])
        codes = nodes.wait(150)
        assert codes == [0, 0], nodes.output(0) + nodes.output(1)
    [record] = json.loads((tmp_path / "run.json").read_text())
    assert (record["stages"], record["processes"]) == (2, 2) and record["samples_per_s"] > 0
    return out


@pytest.mark.timeout(300)
def test_local_pipeline_on_two_torchrun_nodes_equals_the_single_process_learner(tmp_path, free_port):
    out = _two_nodes(tmp_path, free_port, LOCAL)
    cfg = _config(LOCAL)
    ref = local_reference(cfg)[0].state_dict()
    seen = set()
    for s in range(2):
        for name, value in torch.load(out / f"stage{s}.pt")["state"].items():
            assert torch.equal(value, ref[name]), f"stage {s}: {name} differs"
            seen.add(name)
    assert seen == set(ref)


@pytest.mark.timeout(300)
def test_1f1b_on_two_plain_torchrun_nodes_equals_backprop(tmp_path, free_port):
    out = _two_nodes(tmp_path, free_port, ONE_F_ONE_B, launcher=PLAIN_TORCHRUN)
    ref = backprop_reference(_config(ONE_F_ONE_B), 1).state_dict()
    held = 0
    for s in range(2):
        for name, value in torch.load(out / f"stage{s}.pt")["state"].items():
            if name.startswith("net."):
                torch.testing.assert_close(value, ref[name], rtol=1e-5, atol=1e-6, msg=f"stage {s}: {name}")
                held += 1
    assert held == sum(1 for name in ref if name.startswith("net."))


def _micro_batches_done(stage: psutil.Process) -> int:
    """The progress counter the stages keep in their rendezvous store (rank 0 adds to it)."""
    env = stage.environ()
    store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), is_master=False, wait_for_workers=False)
    prefix = f"paper_repro/{env['TORCHELASTIC_RUN_ID']}/{env['TORCHELASTIC_RESTART_COUNT']}/"
    return dist.PrefixStore(prefix, store).add("progress", 0)


@pytest.mark.timeout(300)
def test_a_node_that_dies_mid_run_ends_the_other_naming_its_stage(tmp_path, free_port):
    long_run = [*LOCAL, "--steps", "3000", "--heartbeat-timeout", "3"]   # minutes: it is killed long before
    with Nodes(tmp_path, free_port) as nodes:
        nodes.start_both(long_run)
        stages = [nodes.stage_process(r) for r in (0, 1)]
        ranks = [int(s.environ()["RANK"]) for s in stages]
        assert sorted(ranks) == [0, 1]
        dying = ranks.index(1)   # the node whose stage does not host the stages' store
        deadline = time.monotonic() + 120
        while _micro_batches_done(stages[1 - dying]) < 5:   # mid-run: both stages are training
            assert time.monotonic() < deadline and all(p.poll() is None for p in nodes.procs)
            time.sleep(0.1)
        nodes.kill_node(dying)
        t0 = time.monotonic()
        survivor = nodes.procs[1 - dying]
        code = survivor.wait(timeout=90)
        seconds = time.monotonic() - t0
        text = nodes.output(1 - dying)
    assert code == 1, text
    assert "[stage 0] stopping because stage 1 stopped responding: no heartbeat" in text, text
    assert text.strip().splitlines()[-1] == (f"error: the stage process of rank 0 (local rank 0, pid {stages[1 - dying].pid}) "
                                             "exited with status 3 (its own message is above)"), text
    assert seconds < 60   # the 3 s heartbeat timeout, then the launcher notices, on a loaded machine too


@pytest.mark.timeout(120)
def test_a_node_that_never_arrives_ends_the_first_within_the_rendezvous_timeout(tmp_path, free_port):
    with Nodes(tmp_path, free_port, join_timeout=5) as nodes:
        t0 = time.monotonic()
        first = nodes.start(0, LOCAL)
        code = first.wait(timeout=90)
        seconds = time.monotonic() - t0
        text = nodes.output(0)
    assert code == 1
    assert text.strip().splitlines()[-1] == (
        f"error: rendezvous 'test' at localhost:{nodes.port} (c10d) timed out after 5 s (join_timeout): not "
        "every one of the --nnodes 2 nodes arrived; start torchrun on each node with the same --nnodes, "
        "--rdzv-endpoint and --rdzv-id, or raise --rdzv-conf join_timeout=SECONDS")
    assert "Traceback" not in text
    assert seconds < 5 + 60   # the timeout plus starting Python and importing torch on a loaded machine
