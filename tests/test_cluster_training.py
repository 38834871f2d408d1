"""cluster/train_node.sh, the per-node part of cluster/train.sbatch, run as two nodes on this
machine (one stage process each, c10d rendezvous on localhost): the run trains exactly what
single-process training at the micro-batch size trains, and rank 0 writes its records."""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from paper_repro import train

REPO = Path(__file__).resolve().parent.parent
NET = {"depth": 4, "width": 16}


@pytest.mark.timeout(300)
def test_two_nodes_train_what_one_process_trains(tmp_path, free_port):
    (tmp_path / "training.json").write_text(json.dumps({"eval_every": 8, "eval_every_examples": 64}))
    port = free_port
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "MASTER_", "RANK"))}
    env.update(NNODES="2", HEAD="127.0.0.1", PORT=str(port), DEVICE="cpu", THREADS="1", RUN_ID="test",
               JOIN_TIMEOUT="120", TRAINING=str(tmp_path / "training.json"), OUT=str(tmp_path / "result.json"),
               PYTHON=sys.executable, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    args = ["--model", "mlp", "--model-kwargs", json.dumps(NET), "--dataset", "digits", "--stages", "2",
            "--schedule", "local", "--method", "greedy", "--cut", "blocks", "--micro-batch", "8",
            "--micro-batches", "4", "--steps", "4", "--lr", "3e-3", "--timeout", "60", "--init-timeout", "120"]
    procs = []
    try:
        for rank in (0, 1):
            log = open(tmp_path / f"node{rank}.log", "w")
            procs.append(subprocess.Popen(["bash", "cluster/train_node.sh", *args], cwd=REPO,
                                          env={**env, "NODE_RANK": str(rank)}, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
            if rank == 0:                             # node 0 hosts the rendezvous: start node 1 after it
                deadline = time.monotonic() + 60
                while True:
                    try:
                        socket.create_connection(("127.0.0.1", port), timeout=1).close()
                        break
                    except OSError:
                        assert procs[0].poll() is None and time.monotonic() < deadline
                        time.sleep(0.1)
        codes = [p.wait(timeout=240) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
    logs = "".join((tmp_path / f"node{r}.log").read_text() for r in (0, 1))
    assert codes == [0, 0], logs
    [result] = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "finished" and result["schedule"] == "local"
    ref = train.train(train.TrainConfig(model="mlp", model_kwargs=NET, method="greedy", dataset="digits", batch_size=8,
                                        steps=16, lr=3e-3, eval_every=8, eval_every_examples=64, progress=False))
    records = pd.DataFrame(result["records"]).drop(columns="wall_time")
    pd.testing.assert_frame_equal(records, ref.records.drop(columns="wall_time"), check_exact=True)
