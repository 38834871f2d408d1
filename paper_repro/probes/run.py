"""One command per long probing experiment, resumable:

    python -m paper_repro.probes.run features      --profile cpu --data-dir DIR
    python -m paper_repro.probes.run random_labels --profile cpu --data-dir DIR
    python -m paper_repro.probes.run ablation      --profile cpu --data-dir DIR
    python -m paper_repro.probes.run all           --profile cpu --data-dir DIR   (the three, in turn)

Results go to ``<results>/<experiment>_<profile>/`` (default ``results/similarity``): one file
per finished unit of work, then the summary tables. Rerunning the same command skips the
finished units, so an interrupted run continues where it stopped.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..settings import PROFILES, similarity_settings
from .ablation import run_ablation
from .experiments import run_features, run_random_labels, set_threads
from .method_runs import load_data

EXPERIMENTS = ("features", "random_labels", "ablation")


def experiment_dir(results: str | Path, experiment: str, profile: str) -> Path:
    """Where ``experiment`` at ``profile`` keeps its units and tables."""
    if experiment not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {experiment!r}; valid: {', '.join(EXPERIMENTS)}")
    return Path(results) / f"{experiment}_{profile}"


def run(experiment: str, profile: str, data_dir: str | None, results: str | Path = "results/similarity",
        device: str = "cpu", methods: list[str] | None = None, seeds: list[int] | None = None,
        nets: list[str] | None = None) -> dict:
    """Run (or continue) one experiment; returns its summary tables. ``methods`` / ``seeds`` /
    ``nets`` restrict the call to some units (random labels: all three; features and ablation: seeds)."""
    root = experiment_dir(results, experiment, profile)
    if experiment == "features":
        if methods is not None or nets is not None:
            raise ValueError("the features experiment takes no --methods / --nets (every method, per seed)")
        S = similarity_settings("features", profile)
        return run_features(S, load_data(S, data_dir), root, device, log=lambda line: print(line, flush=True),
                            seeds=seeds)
    if experiment == "random_labels":
        return run_random_labels(similarity_settings("random_labels", profile), data_dir, root, device,
                                 methods=methods, seeds=seeds, nets=nets)
    if methods is not None or nets is not None:
        raise ValueError("the ablation takes no --methods / --nets (each variant says how it trains)")
    return run_ablation(similarity_settings("gradient", profile), data_dir, root, device, seeds=seeds)


def _list(text: str, cast=str) -> list:
    try:
        return [cast(t) for t in text.split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_repro.probes.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=EXPERIMENTS + ("all",))
    parser.add_argument("--profile", choices=PROFILES, default="quick")
    parser.add_argument("--data-dir", default=None, help="CIFAR-10 folder (not needed for the offline quick profile)")
    parser.add_argument("--results", default="results/similarity", help="parent folder of the experiment folders")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--methods", type=_list, default=None, help="only these methods, e.g. backprop,greedy")
    parser.add_argument("--seeds", type=lambda t: _list(t, int), default=None, help="only these seeds, e.g. 0,1")
    parser.add_argument("--nets", type=_list, default=None, help="random labels: only these nets, e.g. resnet18")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    for experiment in EXPERIMENTS if args.experiment == "all" else (args.experiment,):
        tables = run(experiment, args.profile, args.data_dir, args.results, args.device, args.methods, args.seeds,
                     args.nets)
        for name, table in tables.items():
            if len(table) <= 40:
                print(f"\n{experiment}: {name}\n{table.to_string(index=False)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
