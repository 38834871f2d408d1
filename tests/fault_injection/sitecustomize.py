"""Test-only fault injection into pipeline stage processes (never part of the package).

The failure tests start the stage processes with this folder on ``PYTHONPATH`` and
``PAPER_REPRO_TEST_FAULT=MODE@RANK:STEP`` in their environment (:func:`conftest.inject_fault`);
Python imports this module at start-up, and it wraps ``Context.progress``, which every stage loop
calls once at the end of each step: process ``RANK`` then raises, SIGKILLs itself or hangs (MODE
``raise``, ``kill``, ``hang``) after finishing step ``STEP`` (counted from 0 in each launch)."""
import os

FAULT = os.environ.get("PAPER_REPRO_TEST_FAULT")

if FAULT:
    import signal
    import time

    from paper_repro.distributed import comm

    _mode, _where = FAULT.split("@")
    _rank, _step = (int(v) for v in _where.split(":"))
    _done = {"steps": 0}
    _progress = comm.Context.progress

    def _progress_then_fail(self, n=1):
        _progress(self, n)
        step = _done["steps"]
        _done["steps"] += 1
        if self.rank != _rank or step != _step:
            return
        if _mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if _mode == "hang":
            time.sleep(10 ** 6)
        raise RuntimeError(f"injected fault after step {step} (PAPER_REPRO_TEST_FAULT={FAULT})")

    comm.Context.progress = _progress_then_fail
