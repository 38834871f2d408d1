"""tools/gpu_session.sh, the one prepared GPU run, exercised here without a GPU.

A stand-in ``python3`` (and ``nvidia-smi``) on PATH records every command the script runs and hands
each step's arguments to the real program's own argument parser, stopping right after a successful
parse: a misspelt flag or a wrong value fails here instead of on a lent GPU's first minute. The
script's own plumbing is checked too: every step runs under its limit, one failed step does not
stop the others, the exit status counts the failures, the pipeline validation runs only with two
GPUs or more, and the packed results hold the log of every step."""
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(300)

STANDIN = r'''
import argparse, json, os, runpy, sys
args = sys.argv[1:]
with open(os.environ["STANDIN_LOG"], "a") as f:
    f.write(json.dumps(args) + "\n")
if args[:1] == ["-c"]:                                   # the script's one-line queries
    print(os.environ["STANDIN_GPUS"] if "device_count" in args[1] else "torch (stand-in)")
    sys.exit(0)
if os.environ.get("STANDIN_FAIL") and any(os.environ["STANDIN_FAIL"] in a for a in args):
    sys.exit(3)
if os.environ.get("STANDIN_PARSE") != "1":
    sys.exit(0)
if args[:2] == ["-m", "papermill"]:                      # the notebook and its parameters must exist
    notebook = args[2]
    source = json.loads(open(notebook).read())
    params = next("".join(c["source"]) for c in source["cells"] if "parameters" in c["metadata"].get("tags", []))
    names = [args[i + 1] for i, a in enumerate(args) if a == "-p"]
    missing = [n for n in names if f"{n} =" not in params]
    sys.exit(f"unknown notebook parameters {missing}" if missing else 0)
if args[:2] == ["-m", "pip"]:
    sys.exit(0)
if args[:2] == ["-m", "pytest"]:                         # collect only: the tests and their marker must exist
    import pytest
    sys.exit(pytest.main([*args[2:], "--collect-only", "--strict-markers"]))
parse = argparse.ArgumentParser.parse_args
def parse_then_stop(self, argv=None, namespace=None):
    parse(self, argv, namespace)
    raise SystemExit(0)
argparse.ArgumentParser.parse_args = parse_then_stop
if args[0] == "-m":
    sys.path.insert(0, os.getcwd())                      # as python -m puts the working directory first
    sys.argv = [args[1]] + args[2:]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
else:
    sys.argv = args
    runpy.run_path(args[0], run_name="__main__")
'''


def run_script(tmp_path: Path, gpus: int, parse: bool, fail: str = "") -> tuple[int, list[list[str]], dict]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "standin.py").write_text(STANDIN)
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "{tmp_path / "standin.py"}" "$@"\n')
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'stand-in GPU'\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    out, log = tmp_path / "out", tmp_path / "commands.jsonl"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", TMPDIR=str(tmp_path), STANDIN_LOG=str(log),
               STANDIN_GPUS=str(gpus), STANDIN_PARSE="1" if parse else "0", STANDIN_FAIL=fail)
    done = subprocess.run(["bash", str(ROOT / "tools" / "gpu_session.sh"), str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=280)
    commands = [json.loads(line) for line in log.read_text().splitlines()]
    with tarfile.open(out / "gpu_session.tar.gz") as tar:
        packed = {m.name.removeprefix("./"): tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
    for w in tmp_path.glob("gpu_session.*"):
        shutil.rmtree(w)
    return done.returncode, commands, packed


def steps(packed: dict) -> dict[str, int]:
    """``{step: exit status}`` from the packed steps.log."""
    return {line.split()[1].rstrip(":"): int(line.split()[3]) for line in packed["steps.log"].splitlines()}


def test_every_step_parses_with_the_real_programs_and_one_failure_does_not_stop_the_rest(tmp_path):
    rc, commands, packed = run_script(tmp_path, gpus=2, parse=True, fail="gpu_calibrate.py")
    ran = steps(packed)
    expected = ["environment", "cuda_tests", "memory_s4_mb8", "calibrate", "selfcheck", "memory_s8_mb8", "memory_s4_mb32",
                "validate_cuda", "link_cuda", "validate_cuda_insitu", "notebook08_full"]
    assert [s for s in ran if s != "wheels"] == expected, packed["steps.log"]
    failed = {s for s, code in ran.items() if code != 0}
    assert failed == {"calibrate"} and ran["calibrate"] == 3, {s: packed.get(f"{s}.log") for s in failed}
    assert rc == 1                                           # the number of failed steps
    assert all(f"{s}.log" in packed for s in ran)
    validate = next(c for c in commands if c[:2] == ["-m", "research.simulator_validation.validate"])
    assert validate[validate.index("--device") + 1] == "cuda" and "--validate" in validate
    assert "8 tests collected" in packed["cuda_tests.log"], packed["cuda_tests.log"]


def test_one_gpu_skips_the_pipeline_validation(tmp_path):
    rc, commands, packed = run_script(tmp_path, gpus=1, parse=False)
    assert rc == 0
    assert "validate_cuda" not in steps(packed) and "notebook08_full" in steps(packed)
    assert not any(c[:2] == ["-m", "research.simulator_validation.validate"] for c in commands)
