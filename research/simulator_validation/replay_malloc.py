"""Does a stage's compute cost depend on the schedule's order, and is the allocator why?

For the runs of a validation (``results/simulate/*.runs.json``), every stage's compute is
replayed in its schedule's order, all stages at once and with nothing communicated
(:mod:`research.simulator_validation.replay`), once with glibc's default malloc and once with the stage
processes keeping freed memory (``CPU_MALLOC_ENV``), alternating the two ``--sets`` times. The
table puts the mean forward+backward per micro-batch of each stage beside what the real runs
measured inside the same calls (their ``forward_backward`` phase) and what the per-block
calibration sums to.

    .venv/bin/python -m research.simulator_validation.replay_malloc results/simulate/validation_mlp8x1024_cpu2_busylink_glibc.runs.json \\
        results/simulate/replay_malloc_mlp8x1024_cpu2 --rounds 3 --sets 2

writes ``OUT.json`` (every replay) and ``OUT.md`` (the table). Run it on an idle machine.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from paper_repro.simulate.calibrate import measure
from paper_repro.simulate.costs import fresh_share, schedule_costs
from .replay import CPU_MALLOC_ENV, replay
from .validate import in_situ_times, machine_note, record_job

ALLOCATORS = {"glibc": {}, "keep-freed": dict(CPU_MALLOC_ENV)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", help="a validation's real runs (bench pipeline JSON)")
    ap.add_argument("out", help="output path without suffix (.json and .md are written)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per replay (median)")
    ap.add_argument("--sets", type=int, default=2, help="alternations of the two allocators")
    args = ap.parse_args(argv)
    records = [r for r in json.loads(Path(args.runs).read_text()) if not r.get("comm_only")]
    jobs = list({j.key(): j for j in map(record_job, records)}.values())
    before, t0 = machine_note(), time.time()
    replays = {name: [] for name in ALLOCATORS}
    for k in range(args.sets):
        for name, env in ALLOCATORS.items():
            times = replay(jobs, rounds=args.rounds, malloc_env=env)
            replays[name].append({f"{j.cfg.micro_batch} {j.schedule}": [[t.forward, t.backward, t.optimizer]
                                                                      for t in times[j.key()]] for j in jobs})
            print(f"set {k + 1}/{args.sets}: {name} done ({time.time() - t0:.0f} s)", flush=True)
    calibrations = {B: measure(j.cfg, reps=10) for B, j in {j.cfg.micro_batch: j for j in jobs}.items()}
    rows = []
    for r, job in zip(records, map(record_job, records)):
        key = f"{job.cfg.micro_batch} {job.schedule}"
        c = schedule_costs(calibrations[job.cfg.micro_batch], job.schedule, len(job.cut),
                           blocks=[list(b) for b in job.cut],
                           fresh=fresh_share(job.schedule, job.cfg.micro_batches, job.cfg.update_every))
        recompute = job.schedule.endswith("-recompute")
        for s, real in enumerate(in_situ_times(r, c, recompute)):
            measured = real.forward + real.backward
            fb = {name: statistics.median(t[key][s][0] + t[key][s][1] for t in sets) for name, sets in replays.items()}
            rows.append({"micro_batch": job.cfg.micro_batch, "schedule": job.schedule, "stage": s,
                         "real_run_ms": measured * 1e3,
                         **{f"replay_{n.replace('-', '_')}_ms": v * 1e3 for n, v in fb.items()},
                         "calibration_ms": (c.forward[s] * (2 if recompute else 1) + c.backward(s)) * 1e3})
    Path(f"{args.out}.json").write_text(json.dumps({"runs": args.runs, "rounds": args.rounds, "sets": args.sets,
                                                    "malloc_env": ALLOCATORS, "replays": replays, "rows": rows},
                                                   indent=1))
    cols = list(rows[0])
    lines = ["# Forward+backward per micro-batch: real runs, replays with two allocators, per-block calibration", "",
             f"Real runs: {args.runs} (their forward_backward phase per micro-batch and stage). Replays: every stage's "
             f"compute in its schedule's order, both stages at once, nothing communicated, median of {args.rounds} "
             f"rounds, then the median over {args.sets} alternations of glibc's default malloc and keep-freed "
             f"({', '.join(f'{k}={v}' for k, v in CPU_MALLOC_ENV.items())}). Calibration: the per-block costs "
             f"(best of 10, one process) summed over the stage. Measured on {before} ({time.time() - t0:.0f} s). "
             f"Made with `{' '.join(['.venv/bin/python', '-m', 'research.simulator_validation.replay_malloc', *sys.argv[1:]])}`.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        lines.append("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row.values()) + " |")
    Path(f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[4:]))
    print(f"written to {args.out}.json and {args.out}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
