"""What one minor page fault costs on this machine: the first write to each page of fresh
anonymous memory (an allocator that gave memory back to the system pays this when it takes it
again), against writing the same pages once they are mapped. With the fault counts that
``bench pipeline`` recorded per stage when these runs were made (``minor_page_faults_per_stage``, no
longer recorded) this bounds how much of a schedule's time its page faults can explain.

    .venv/bin/python -m research.simulator_validation.page_fault_cost --out results/pipeline/page_fault_cost

writes ``OUT.md``. Run it on an otherwise idle machine.
"""
from __future__ import annotations

import argparse
import mmap
import platform
import statistics
import time
from pathlib import Path

import resource


def minor_page_faults() -> int:
    """Minor page faults of this process so far: pages the kernel had to map in."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def first_touch(size: int) -> tuple[float, int, float]:
    """Seconds to write one byte per page of ``size`` fresh bytes, the faults that took, and the
    seconds to write the same pages again (mapped by then)."""
    buf = mmap.mmap(-1, size)
    pages = range(0, size, mmap.PAGESIZE)
    f0, t0 = minor_page_faults(), time.perf_counter()
    for p in pages:
        buf[p] = 1
    fresh, faults = time.perf_counter() - t0, minor_page_faults() - f0
    t0 = time.perf_counter()
    for p in pages:
        buf[p] = 2
    again = time.perf_counter() - t0
    buf.close()
    return fresh, faults, again


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes-mb", default="16,64,128", help="comma list of buffer sizes, MiB")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", required=True, help="output path without suffix")
    args = ap.parse_args(argv)
    if minor_page_faults() is None:
        raise SystemExit("error: this platform has no resource module to count page faults")
    lines = ["# The cost of a minor page fault", "",
             f"{platform.machine()}, {platform.system()} {platform.release()}, one process, page size "
             f"{mmap.PAGESIZE} bytes; {args.rounds} rounds per size. Per fault: (time of the first write to each "
             "page - time of writing the same pages again) / faults counted. Made with "
             f"`.venv/bin/python -m research.simulator_validation.page_fault_cost --sizes-mb {args.sizes_mb} --rounds {args.rounds} "
             f"--out {args.out}`.", "",
             "| buffer | faults per round | us per fault, median [min-max] |", "|---|---|---|"]
    for mb in (int(v) for v in args.sizes_mb.split(",")):
        per, counts = [], []
        for _ in range(args.rounds):
            fresh, faults, again = first_touch(mb << 20)
            per.append((fresh - again) / faults * 1e6)
            counts.append(faults)
        lines.append(f"| {mb} MiB | {statistics.median(counts):.0f} | "
                     f"{statistics.median(per):.2f} [{min(per):.2f}-{max(per):.2f}] |")
        print(lines[-1], flush=True)
    Path(f"{args.out}.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
