"""The ``paper-repro`` command.

Each module that owns a command exposes ``add_cli(subparsers)``; this file wires them
together and turns bad input (``ValueError``, including ``DataError``) into one line
``error: ...`` and exit status 2, and Ctrl-C into exit status 130.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

# modules whose add_cli(subparsers) registers a command, in help order
COMMAND_MODULES = ("paper_repro.sweep", "paper_repro.bench", "paper_repro.notebooks", "paper_repro.simulate.cli")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _json_dict(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({err})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def add_train_cli(subparsers) -> None:
    from . import data, models, train

    p = subparsers.add_parser("train", help="train one model x method x data set in one process")
    p.add_argument("--model", default="mlp", choices=models.MODELS)
    p.add_argument("--method", default="backprop", help="backprop | greedy | overlapping | chunked-K")
    p.add_argument("--dataset", default="digits", choices=data.DATASETS)
    p.add_argument("--data-dir", default=None, help="where the data set lives (see README: Data)")
    p.add_argument("--steps", type=_positive_int, default=500)
    p.add_argument("--batch-size", type=_positive_int, default=64)
    p.add_argument("--lr", type=_positive_float, default=1e-3)
    p.add_argument("--optimizer", default="adam", choices=train.OPTIMIZERS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--device", default="cpu")
    p.add_argument("--model-kwargs", type=_json_dict, default={}, help='JSON, e.g. \'{"depth": 4, "width": 256}\'')
    p.add_argument("--data-kwargs", type=_json_dict, default={}, help='JSON, e.g. \'{"max_train": 5000}\'')
    p.add_argument("--out", default=None, help="write the per-step records here (.csv)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_run_train)


def _check_writable(path: str, option: str) -> None:
    """Fail now, not after hours of training, when ``path`` cannot be written."""
    out = Path(path)
    if out.is_dir():
        raise ValueError(f"{option} {path!r} is a directory; give a file name such as {str(out / 'records.csv')!r}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        probe = out.with_name(out.name + ".tmp")
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise ValueError(f"cannot write {option} {path!r}: {err.strerror or err}") from None


def _run_train(args) -> int:
    from . import train

    if args.out:
        _check_writable(args.out, "--out")
    cfg = train.TrainConfig(model=args.model, method=args.method, dataset=args.dataset, data_dir=args.data_dir,
                            steps=args.steps, batch_size=args.batch_size, lr=args.lr, optimizer=args.optimizer,
                            seed=args.seed, eval_every=args.eval_every, device=args.device,
                            model_kwargs=args.model_kwargs, data_kwargs=args.data_kwargs,
                            progress=not args.no_progress)
    result = train.train(cfg)
    summary = result.summary()
    width = max(map(len, summary))
    for key, value in summary.items():
        print(f"{key:<{width}}  {value:.4f}" if isinstance(value, float) else f"{key:<{width}}  {value}")
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        result.records.assign(method=cfg.method, model=cfg.model, dataset=cfg.dataset,
                              status=result.status).to_csv(tmp, index=False)
        tmp.replace(out)
        print(f"records written to {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="paper-repro", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_train_cli(subparsers)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise
            continue
        module.add_cli(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished work was saved", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
