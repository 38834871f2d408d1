"""The options of a pipeline run and the configs they expand to.

``add_arguments`` defines the options of ``paper-repro bench pipeline`` (wired in
:mod:`paper_repro.cli`) and of the per-process worker ``python -m
paper_repro.distributed.run``, which torchrun starts without the package's CLI.
``expand`` turns one flat dict of settings into a config per (repeat, micro-batch size,
schedule), and ``configs_for`` does it for a settings dict of :mod:`paper_repro.settings`.
"""
from __future__ import annotations

import argparse

from ..cliargs import choice_list, int_list, json_dict
from ..names import CUT_HELP, MODELS, RUN_NAMES
from .config import BALANCES, DEVICES, DTYPES, OPTIMIZERS, PREFETCH, PipelineConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The run's options, shared by ``paper-repro bench pipeline`` and the worker's entry point."""
    d = PipelineConfig()
    p.add_argument("--schedule", type=choice_list(RUN_NAMES, "schedule"), default=["local"],
                   help=f"{' | '.join(RUN_NAMES)}; a comma list or 'all' runs them one after another. "
                        "local: every stage steps its optimizer after each micro-batch; local/M: after "
                        "accumulating all MICRO_BATCHES of a step (the pipelined-backprop schedules' rule)")
    p.add_argument("--model", default=d.model,
                   help=f"{' | '.join(MODELS)}, or your own as package.module:function "
                        "(importable by every process; called with --model-kwargs; returns a BlockNet or nn.Sequential)")
    p.add_argument("--model-kwargs", type=json_dict, default={}, help='JSON, e.g. \'{"depth": 8, "width": 1024}\'')
    p.add_argument("--method", default=None,
                   help="local-learning method of the local schedule (default chunked-STAGES); "
                        "greedy | chunked-K (overlapping is refused across stages)")
    p.add_argument("--stages", type=int, default=d.stages, help="processes, one stage each")
    p.add_argument("--split", type=int_list, default=None,
                   help="first local module of stages 1..S-1, e.g. 5,9,13 (default: the --balance cut)")
    p.add_argument("--balance", default=d.balance, choices=BALANCES,
                   help="without --split: " + CUT_HELP)
    p.add_argument("--block-split", type=int_list, default=None,
                   help="two-stages-per-process schedules: first block of stages 1..2S-1 "
                        "(default: the --balance cut)")
    p.add_argument("--dp", type=int, default=d.dp,
                   help="replicas per stage (STAGES x DP processes; replicas average gradients with DDP)")
    p.add_argument("--micro-batch", type=int_list, default=[d.micro_batch],
                   help="samples per micro-batch; a comma list runs each size")
    p.add_argument("--micro-batches", type=int, default=d.micro_batches, help="micro-batches per step")
    p.add_argument("--steps", type=int, default=d.steps, help="timed steps")
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps, help="untimed steps first")
    p.add_argument("--dataset", default=d.dataset,
                   help="synthetic (random tensors, default) or a paper_repro.data name (every rank loads it)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--image-size", type=int, default=d.image_size, help="synthetic images: side in pixels")
    p.add_argument("--channels", type=int, default=d.channels, help="synthetic images: channels")
    p.add_argument("--num-classes", type=int, default=d.num_classes, help="synthetic: classes (vocabulary for text)")
    p.add_argument("--seq-len", type=int, default=d.seq_len, help="synthetic text: tokens per sequence")
    p.add_argument("--optimizer", default=d.optimizer, choices=OPTIMIZERS)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--dtype", default=d.dtype, choices=sorted(DTYPES))
    p.add_argument("--device", default=d.device, choices=DEVICES)
    p.add_argument("--threads", type=int, default=None, help="torch threads per process (CPU default: cores / processes)")
    p.add_argument("--max-in-flight", type=int, default=d.max_in_flight,
                   help="local schedule: outstanding forward sends per stage")
    p.add_argument("--update-every", type=int_list, default=[d.update_every],
                   help="local schedule: optimizer step every N micro-batches (1: after each; "
                        "MICRO_BATCHES: once per step, the same as --schedule local/M); a comma list runs each")
    p.add_argument("--repeats", type=int, default=1,
                   help="run everything this many times, interleaved; tables show medians")
    p.add_argument("--timeout", type=float, default=d.timeout, help="seconds any one message may take")
    p.add_argument("--heartbeat-timeout", type=float, default=d.heartbeat_timeout,
                   help="seconds without a heartbeat before a stage is declared dead")
    p.add_argument("--init-timeout", type=float, default=d.init_timeout,
                   help="seconds a stage may take at start-up to reach the rendezvous store "
                        "(MASTER_ADDR:MASTER_PORT) and see every other stage join")
    p.add_argument("--prefetch", default=d.prefetch, choices=PREFETCH,
                   help="stage 0 draws its inputs ahead in a background thread, as a data loader would "
                        "(auto: on GPUs, where drawing them on the host takes as long as a stage computes; "
                        "not on CPUs, whose cores the stages use)")
    p.add_argument("--save-params", default=None,
                   help="directory: each stage saves its parameters there (on several nodes, give a path "
                        "every node shares: each stage writes on its own node)")
    p.add_argument("--json", default=None, help="write the results (a list of runs) here")


def configs_from_args(args) -> list[PipelineConfig]:
    """One config per (repeat, micro-batch size, schedule[, update_every for local]), validated."""
    common = dict(model=args.model, model_kwargs=args.model_kwargs, method=args.method, stages=args.stages,
                  split=args.split, balance=args.balance, block_split=args.block_split, dp=args.dp, micro_batches=args.micro_batches, steps=args.steps,
                  warmup_steps=args.warmup_steps, dataset=args.dataset, data_dir=args.data_dir,
                  image_size=args.image_size, channels=args.channels, num_classes=args.num_classes,
                  seq_len=args.seq_len, optimizer=args.optimizer, lr=args.lr, seed=args.seed,
                  dtype=args.dtype, device=args.device, threads=args.threads,
                  max_in_flight=args.max_in_flight, timeout=args.timeout,
                  heartbeat_timeout=args.heartbeat_timeout, init_timeout=args.init_timeout,
                  save_params=args.save_params, prefetch=args.prefetch)
    return expand(common, args.schedule, args.micro_batch, args.update_every, getattr(args, "repeats", 1))


def expand(common: dict, schedules, micro_batch_sizes, update_every=(1,), repeats: int = 1) -> list[PipelineConfig]:
    """Configs for every (repeat, micro-batch size, schedule) -- interleaved, so that a change in the
    machine's load touches every schedule alike -- with ``local`` once per ``update_every`` and
    ``local/M`` stepping once per step (``update_every = micro_batches``)."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    bad = [s for s in schedules if s not in RUN_NAMES]
    if bad:
        raise ValueError(f"unknown schedule {bad[0]!r}; valid: {', '.join(RUN_NAMES)}")
    configs = []
    for _ in range(repeats):
        for b in micro_batch_sizes:
            for s in schedules:
                if s == "local/M":
                    everies, s = [common.get("micro_batches", PipelineConfig.micro_batches)], "local"
                else:
                    everies = update_every if s == "local" else (1,)
                configs += [PipelineConfig(schedule=s, micro_batch=b, update_every=u, **common).validate()
                            for u in everies]
    return configs


def configs_for(settings: dict, schedules=RUN_NAMES, **overrides) -> list[PipelineConfig]:
    """Configs for every micro-batch size in ``settings`` x schedule (see :func:`expand`);
    ``settings`` (e.g. :func:`paper_repro.settings.pipeline_settings`) may also hold
    ``repeats`` and ``schedules`` (the run names to use when ``schedules`` is not given)."""
    settings = {**settings, **overrides}
    sizes = settings.pop("micro_batch")
    repeats = settings.pop("repeats", 1)
    schedules = settings.pop("schedules", schedules)
    update_every = settings.pop("local_update_every", (1,))
    return expand(settings, schedules, sizes, update_every, repeats)
