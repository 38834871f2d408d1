"""SIGTERM handled like Ctrl-C.

Batch schedulers, ``docker stop`` and ``kill`` send SIGTERM, whose default action ends a
Python process at once: no ``finally`` runs, finished work is not saved and child
processes live on. Inside :func:`sigterm_as_interrupt`, SIGTERM instead raises
:class:`Terminated`, a ``KeyboardInterrupt``, so every code path that saves work and stops
its children on Ctrl-C does the same on SIGTERM. :func:`exit_status` gives the status a
command reports: 130 after Ctrl-C, 143 after SIGTERM (128 + the signal number, the shell's
convention). Nothing here imports the package or torch.
"""
from __future__ import annotations

import contextlib
import signal
import threading


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the process receives ``signum`` (SIGTERM)."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(f"received {signal.Signals(signum).name}")
        self.signum = signum


def _raise_terminated(signum, frame) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def sigterm_as_interrupt():
    """While inside, SIGTERM raises :class:`Terminated` in the main thread; the previous
    handler is restored on the way out. Outside the main thread (where Python cannot set
    signal handlers) a no-op. Nested uses keep the outermost handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is _raise_terminated:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def signal_of(interrupt: BaseException) -> int | None:
    """The signal number behind ``interrupt`` if a :class:`Terminated` is it or caused it
    (an exception raised while handling another keeps that one as ``__context__``, also
    under ``raise ... from None``); None for Ctrl-C."""
    seen = set()
    exc = interrupt
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, Terminated):
            return exc.signum
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def exit_status(interrupt: BaseException) -> int:
    """130 for Ctrl-C, 128 + N after signal N (143 for SIGTERM)."""
    signum = signal_of(interrupt)
    return 130 if signum is None else 128 + signum


def describe(interrupt: BaseException) -> str:
    """``"interrupted"`` (Ctrl-C) or ``"terminated (SIGTERM)"``, to start a message."""
    signum = signal_of(interrupt)
    return "interrupted" if signum is None else f"terminated ({signal.Signals(signum).name})"
