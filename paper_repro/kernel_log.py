"""A logging filter for the notebook kernels that :mod:`paper_repro.notebooks` starts.

ipykernel warns at every start that it "is running over TCP without encryption": the kernels
of ``paper-repro notebooks run`` listen on the local machine only, started and stopped by
this process, so the warning says nothing there and is left out (every other kernel message
is kept). Imported by the kernel process at start-up, so it imports nothing else.
"""
import logging

TCP_WARNING = "Kernel is running over TCP without encryption"


class NoTcpWarning(logging.Filter):
    """Drops ipykernel's warning about unencrypted TCP; passes every other record."""

    def filter(self, record: logging.LogRecord) -> bool:
        return TCP_WARNING not in record.getMessage()


# traitlets' logging configuration of the kernel (IPKernelApp.logging_config): the filter on
# its console handler
LOGGING_CONFIG = {"filters": {"no_tcp_warning": {"()": f"{__name__}.NoTcpWarning"}},
                  "handlers": {"console": {"filters": ["no_tcp_warning"]}}}
