"""Time in a stage's phases (data, forward, backward, optimizer), the same way on every device.

On a CPU a phase takes the wall-clock time between its start and its stop. On a GPU the host only
queues the work, so host time measures kernel launches; there each start and stop records a CUDA
event on the current stream, and a phase takes the time the stream spent between its two events:
the device's own time for the work the phase queued. Events are read at :meth:`Stopwatch.read`,
once the stream has finished them (after :func:`.comm.settle`, once per step), so timing never
makes the host wait mid-step.

Waiting for a message is timed on the host: that wait is what the phases leave out. On a GPU
such a wait can include the stage's own queued work, since NCCL orders a message after the work
queued before it was posted.

``PAPER_REPRO_PHASE_CLOCK=events`` makes a CPU run take the event path too, with events that
read the host's clock (:class:`HostEvent`): the tests run the GPU's way of timing through real
pipelines without a GPU.
"""
from __future__ import annotations

import collections
import contextlib
import os
import time
from typing import Callable

import torch

CLOCK_ENV = "PAPER_REPRO_PHASE_CLOCK"


class HostEvent:
    """``torch.cuda.Event``'s two methods, on the host's clock."""

    def record(self) -> None:
        self.at = time.perf_counter()

    def elapsed_time(self, end: "HostEvent") -> float:
        return (end.at - self.at) * 1e3          # milliseconds, as CUDA events give them


class Stopwatch:
    """Seconds per phase name since the last :meth:`read`; see the module's docstring."""

    def __init__(self, device: torch.device, event: Callable[[], object] | None = None):
        cuda = device.type == "cuda"
        stand_in = not cuda and (event is not None or os.environ.get(CLOCK_ENV) == "events")
        self.on_stream = cuda or stand_in
        if cuda:
            self.clock = "CUDA events on the compute stream"
        else:
            self.clock = "host events (stand-in for CUDA events)" if stand_in else "host wall clock"
        if event is None:
            event = (lambda: torch.cuda.Event(enable_timing=True)) if cuda else HostEvent
        self._event = event
        self._pending: list[tuple[str, object, object]] = []
        self._totals: collections.defaultdict[str, float] = collections.defaultdict(float)

    def start(self):
        """A mark to hand to :meth:`stop`: the time now, or an event recorded on the stream."""
        if not self.on_stream:
            return time.perf_counter()
        event = self._event()
        event.record()
        return event

    def stop(self, name: str, mark) -> None:
        """Add the time since ``mark`` to phase ``name``."""
        if not self.on_stream:
            self._totals[name] += time.perf_counter() - mark
            return
        event = self._event()
        event.record()
        self._pending.append((name, mark, event))

    @contextlib.contextmanager
    def phase(self, name: str):
        mark = self.start()
        try:
            yield
        finally:
            self.stop(name, mark)

    def read(self, *names: str) -> dict[str, float]:
        """Seconds per phase since the last read (``names`` always, 0 where they did not run),
        and start again from zero. On a GPU the stream must have finished the recorded work
        (:func:`.comm.settle`)."""
        for name, begin, end in self._pending:
            self._totals[name] += begin.elapsed_time(end) / 1e3       # milliseconds
        self._pending.clear()
        totals = {**dict.fromkeys(names, 0.0), **self._totals}
        self._totals.clear()
        return totals


class Window:
    """The timed window of a stage's loop: :meth:`mark` ends every iteration, the first ``warm``
    iterations are left out. :meth:`stats`: busy seconds (computing, not waiting for messages)
    over the window."""

    def __init__(self, warm: int):
        self.warm = warm
        self.marks = [time.perf_counter()]

    def mark(self) -> None:
        self.marks.append(time.perf_counter())

    def stats(self, busy: list[float]) -> dict:
        t0, t1 = self.marks[self.warm], self.marks[-1]
        window, busy_s = t1 - t0, sum(busy[self.warm:])
        return {"window_s": window, "busy_s": busy_s, "busy_fraction": busy_s / window if window > 0 else None}
