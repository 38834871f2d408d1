"""``torchrun``, ending a failed multi-node start with one line instead of a traceback.

    python -m paper_repro.distributed.torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29500 --rdzv-id run1 --rdzv-conf join_timeout=120 \\
        -m paper_repro.distributed.run --stages 8 ...

takes torchrun's arguments and runs torchrun itself (``torch.distributed.run.main``) with them.
Only its endings differ: when the rendezvous fails (a node that has not arrived within
``join_timeout``, torch's default 600 s, or an endpoint nobody hosts) torchrun raises a bare
``RendezvousTimeoutError`` with a traceback; this prints ``error: rendezvous ... timed out ...``
naming the endpoint, the run id, the nodes it waited for and the timeout. When a stage process
of this node fails, the stage has printed why (e.g. ``[stage 0] stopping because stage 1 stopped
responding``, a stage on a node that died); this ends with one line giving each failed process's
exit status, where torchrun raises ``ChildFailedError``. Either way the exit status is 1.
"""
from __future__ import annotations

import sys

from torch.distributed import run as torch_run
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.rendezvous.api import RendezvousError, RendezvousTimeoutError

DEFAULT_JOIN_TIMEOUT_S = 600  # torch's default join_timeout of the c10d rendezvous


def _rdzv_conf(text: str | None) -> dict[str, str]:
    pairs = (item.partition("=") for item in (text or "").split(",") if item.strip())
    return {key.strip(): value.strip() for key, _, value in pairs}


def rendezvous_message(args, err: RendezvousError) -> str:
    """One line saying which rendezvous failed, for how long it waited and what to check."""
    where = f"rendezvous '{args.rdzv_id}' at {args.rdzv_endpoint} ({args.rdzv_backend})"
    if isinstance(err, RendezvousTimeoutError):
        join = _rdzv_conf(args.rdzv_conf).get("join_timeout", DEFAULT_JOIN_TIMEOUT_S)
        return (f"{where} timed out after {join} s (join_timeout): not every one of the --nnodes {args.nnodes} "
                "nodes arrived; start torchrun on each node with the same --nnodes, --rdzv-endpoint and "
                "--rdzv-id, or raise --rdzv-conf join_timeout=SECONDS")
    detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"{where} failed: {detail}"


def failure_message(err: ChildFailedError) -> str:
    def exit_text(failure) -> str:
        return (f"was killed by signal {failure.signal_name()}" if failure.exitcode < 0
                else f"exited with status {failure.exitcode}")
    parts = [f"the stage process of rank {rank} (local rank {f.local_rank}, pid {f.pid}) {exit_text(f)}"
             for rank, f in sorted(err.failures.items())]
    return "; ".join(parts) + " (its own message is above)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = torch_run.parse_args(argv)
    try:
        torch_run.main(argv)
    except RendezvousError as err:
        print(f"error: {rendezvous_message(args, err)}", file=sys.stderr, flush=True)
        return 1
    except ChildFailedError as err:
        print(f"error: {failure_message(err)}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
