"""The options of a pipeline run on the command line: ``paper-repro bench pipeline`` (wired in
:mod:`paper_repro.cli`) and the per-process worker ``python -m paper_repro.distributed.run``,
which torchrun starts without the package's CLI.

Nothing here imports torch, so ``paper-repro bench pipeline --help`` answers at once: the
defaults come from :class:`.fields.PipelineFields`, the choices from :mod:`paper_repro.names`.
:mod:`.options` turns the parsed options into configs.
"""
from __future__ import annotations

import argparse

from ..cliargs import add_renamed, choice_list, int_list, json_dict
from ..names import CUT_HELP, CUTS, DEVICES, DTYPES, MODELS, OPTIMIZERS, PREFETCH, RUN_NAMES
from .fields import PipelineFields


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The run's options, shared by ``paper-repro bench pipeline`` and the worker's entry point."""
    # one statement per option, in the order --help lists them: long because a run has many
    d = PipelineFields()
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
    cut_at = p.add_argument("--cut-at", dest="cut_at", type=int_list, default=None, metavar="A,B,...",
                            help="first local module of stages 1..S-1, e.g. 5,9,13 (default: the --cut rule)")
    cut = p.add_argument("--cut", dest="cut", default=d.cut, choices=CUTS,
                         help="without --cut-at: " + CUT_HELP)
    cut_blocks = p.add_argument("--cut-at-blocks", dest="cut_at_blocks", type=int_list, default=None, metavar="A,B,...",
                                help="two-stages-per-process schedules: first block of stages 1..2S-1 "
                                     "(default: the --cut rule)")
    for old, new in (("--split", cut_at), ("--balance", cut), ("--block-split", cut_blocks)):
        add_renamed(p, old, new)
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
    p.add_argument("--input", default=None, choices=("image", "text"),
                   help="synthetic inputs: image (CHANNELS x IMAGE_SIZE x IMAGE_SIZE) or text (windows of SEQ_LEN "
                        "token ids); default: text for the built-in transformer, images otherwise")
    p.add_argument("--optimizer", default=d.optimizer, choices=OPTIMIZERS)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--dtype", default=d.dtype, choices=DTYPES)
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
