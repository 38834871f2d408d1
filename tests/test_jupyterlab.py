"""JupyterLab for real: start a server from this environment on a free localhost port with a
token, run the quickstart notebook cell by cell in a kernel the server starts (REST API for
the kernel, its websocket channel for the messages, as the Lab front end does), and check
what comes back. The server's whole process group is stopped afterwards, pass or fail.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import nbformat
import pytest
import websocket

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "00_quickstart.ipynb"
METHODS = ["backprop", "greedy", "overlapping", "chunked-2", "chunked-3"]
START_TIMEOUT = 90   # s for the server to answer
CELL_TIMEOUT = 300   # s for one cell

pytestmark = pytest.mark.timeout(600)


class Lab:
    """A running JupyterLab server: its URL, token and REST calls."""

    def __init__(self, proc, port, token, log):
        self.proc, self.port, self.token, self.log = proc, port, token, log
        self.url = f"http://127.0.0.1:{port}"

    def request(self, method, path, body=None, timeout=30):
        req = urllib.request.Request(f"{self.url}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
            return r.status, (json.loads(text) if text.lstrip().startswith(("{", "[")) else text)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@pytest.fixture
def lab(tmp_path, free_port):
    token = uuid.uuid4().hex
    port = free_port
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(NOTEBOOK, work / NOTEBOOK.name)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), OMP_NUM_THREADS="1", MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    log = tmp_path / "lab.log"
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={work}", "--ServerApp.open_browser=False"]
    if os.geteuid() == 0:  # CI and containers run as root; the server refuses that unless told
        cmd.append("--allow-root")
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    server = Lab(proc, port, token, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{server.log_tail()}")
            try:
                if server.request("GET", "/api/status", timeout=5)[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"jupyter lab did not answer within {START_TIMEOUT} s:\n{server.log_tail()}")
            time.sleep(0.5)
        yield server
    finally:
        _stop(proc)


def _stop(proc):
    """SIGTERM to the server's process group (server and kernels), SIGKILL after 15 s."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            os.killpg(proc.pid, signal.SIGKILL)  # a kernel that outlived its server
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _message(session, code):
    msg_id = uuid.uuid4().hex
    return msg_id, json.dumps({
        "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test", "session": session,
                   "date": "", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True}})


def _execute(ws, session, code):
    """Run ``code``; (reply status, outputs as nbformat-like dicts) once the kernel is idle."""
    msg_id, text = _message(session, code)
    ws.send(text)
    outputs, reply, idle = [], None, False
    deadline = time.monotonic() + CELL_TIMEOUT
    while reply is None or not idle:
        ws.settimeout(max(1.0, deadline - time.monotonic()))
        if time.monotonic() > deadline:
            raise TimeoutError(f"cell did not finish within {CELL_TIMEOUT} s:\n{code[:200]}")
        msg = json.loads(ws.recv())
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind = msg["header"]["msg_type"]
        if msg["channel"] == "shell" and kind == "execute_reply":
            reply = msg["content"]
        elif kind == "status":
            idle = msg["content"]["execution_state"] == "idle"
        elif kind in ("stream", "execute_result", "display_data", "error"):
            outputs.append(dict(msg["content"], output_type=kind))
    return reply["status"], outputs


def test_quickstart_runs_in_jupyterlab(lab, tmp_path):
    status, page = lab.request("GET", "/lab")
    assert status == 200 and "JupyterLab" in page  # the Lab front end itself, not only a server
    status, kernel = lab.request("POST", "/api/kernels", {"name": "python3"})
    assert status == 201, kernel
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{lab.port}/api/kernels/{kernel['id']}/channels?token={lab.token}", timeout=60)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    session = uuid.uuid4().hex
    figures = tmp_path / "figures"
    results = []
    try:
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            code = cell.source
            if "parameters" in cell.metadata.get("tags", []):  # what papermill would inject after it
                code += f"\nfigures_dir = {str(figures)!r}"
            status, outputs = _execute(ws, session, code)
            errors = [o for o in outputs if o["output_type"] == "error"]
            assert status == "ok" and not errors, (
                f"cell failed:\n{code}\n" + "\n".join(f"{e['ename']}: {e['evalue']}" for e in errors))
            results.append((code, outputs))
    finally:
        ws.close()
        lab.request("DELETE", f"/api/kernels/{kernel['id']}")

    # the summary table of the training cell, then the final check table: every method named
    summary = next(outs for code, outs in results if "compare_methods" in code)
    table = next(o for o in summary if o["output_type"] == "execute_result")["data"]["text/plain"]
    # (the last cell that displays a table: the notebook's check cell after it displays nothing)
    final = next(o for _, outs in reversed(results) for o in outs
                 if o["output_type"] == "display_data")["data"]["text/plain"]
    for text in (table, final):
        assert all(m in text for m in METHODS), text
    assert len(table.strip().splitlines()) == 1 + len(METHODS)  # header + one row per method
    assert sorted(p.name for p in figures.glob("*.png")) == [
        "00_quickstart_accuracy_quick.png", "00_quickstart_loss_quick.png"]


def test_a_failing_cell_is_seen_and_the_server_stops_with_its_kernels(lab):
    status, kernel = lab.request("POST", "/api/kernels", {"name": "python3"})
    assert status == 201
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{lab.port}/api/kernels/{kernel['id']}/channels?token={lab.token}", timeout=60)
    try:
        status, outputs = _execute(ws, uuid.uuid4().hex, "print('before')\nraise ValueError('boom')")
    finally:
        ws.close()
    assert status == "error"
    assert [o["output_type"] for o in outputs] == ["stream", "error"]
    assert outputs[1]["ename"] == "ValueError" and outputs[1]["evalue"] == "boom"
    pgid = lab.proc.pid
    _stop(lab.proc)
    assert lab.proc.poll() is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)  # nothing of the group is left, the kernel included
