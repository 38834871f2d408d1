"""What a pipeline run trains on: the data (or synthetic inputs of the configured shape),
the micro-batch stream of stage 0, the learner every process builds, and the labels' shape.

The model is a built-in name or a user's factory ``package.module:function``
(:mod:`paper_repro.factory`); synthetic inputs are token windows for the built-in
Transformer and images (``channels`` x ``image_size`` x ``image_size``) for every other
model, a user's included unless ``input`` says ``text`` (a user's token model)."""
from __future__ import annotations

import queue
import threading

import torch

from .. import build, methods
from ..data import DataSet, InputSpec
from ..factory import build_from_factory, is_factory_name
from .config import DTYPES, PipelineConfig


def data_spec(cfg: PipelineConfig) -> tuple[DataSet | None, DataSet | InputSpec]:
    """(data set or None, what the model takes: the data set itself, or the synthetic inputs'
    :class:`~paper_repro.data.InputSpec`) for ``cfg``."""
    if cfg.dataset == "synthetic":
        if cfg.input == "text" or (cfg.input is None and cfg.model == "transformer"):
            return None, InputSpec.text(cfg.num_classes, cfg.seq_len)
        return None, InputSpec.image(cfg.num_classes, (cfg.channels, cfg.image_size, cfg.image_size))
    ds = build.load_data(cfg)
    return ds, ds


def build_learner(cfg: PipelineConfig, spec=None) -> methods.Learner:
    """The full learner of ``cfg.local_method``, seeded with ``cfg.seed`` (every process builds
    the same one, then keeps its own modules); a factory's model is built by calling it."""
    spec = spec if spec is not None else data_spec(cfg)[1]
    if not is_factory_name(cfg.model):
        return build.build_learner(cfg, spec, cfg.local_method, cfg.seed).to(DTYPES[cfg.dtype])
    torch.manual_seed(cfg.seed)  # as build.build_learner: the same weights in every process
    example = (torch.zeros(2, spec.seq_len, dtype=torch.long) if spec.kind == "text"
               else torch.zeros(2, *spec.input_shape))
    net = build_from_factory(cfg.model, cfg.model_kwargs, spec.num_classes, example)
    return methods.build(net, cfg.local_method).to(DTYPES[cfg.dtype])


def synthetic_batches(cfg: PipelineConfig, spec, generator: torch.Generator):
    """Random micro-batches of the right shape forever (inputs N(0,1) or random tokens, random labels)."""
    b = cfg.micro_batch
    while True:
        if spec.kind == "text":
            yield (torch.randint(spec.num_classes, (b, spec.seq_len), generator=generator),
                   torch.randint(spec.num_classes, (b, spec.seq_len), generator=generator))
        else:
            yield (torch.randn(b, *spec.input_shape, generator=generator).to(DTYPES[cfg.dtype]),
                   torch.randint(spec.num_classes, (b,), generator=generator))


def micro_batches(cfg: PipelineConfig, ds, spec, seed: int, skip: int = 0, keep=None):
    """The micro-batch stream read by stage 0 (or by each DDP rank, with its own ``seed``).

    ``skip``: the stream's first ``skip`` micro-batches are drawn and left out (a resumed run
    goes on where it stopped). ``keep(j)``: only the micro-batches ``j`` (counted from the
    stream's start) for which it is true are read, the others drawn and left out (each DDP rank
    of a training run reads its share of one stream). Data sets draw the left-out ones as
    indices only, without reading them."""
    gen = torch.Generator().manual_seed(seed)
    if ds is None:
        stream = synthetic_batches(cfg, spec, gen)
        return (b for j, b in enumerate(stream) if j >= skip and (keep is None or keep(j)))
    dtype = DTYPES[cfg.dtype]

    def read():
        for j, idx in enumerate(ds.index_sampler("train", cfg.micro_batch, gen)):
            if j >= skip and (keep is None or keep(j)):
                x, y = ds.batch("train", idx)
                yield (x.to(dtype) if x.is_floating_point() else x, y)
    return read()


def prefetched(items, depth: int = 2):
    """``items`` (an iterator) in the same order, each drawn up to ``depth`` items ahead in a
    background thread, as a data loader's workers would; an error in the drawing is raised here."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    done, stop = object(), threading.Event()

    def put(entry) -> bool:                   # False once the reader has gone
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def draw() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
        except BaseException as err:          # handed to the reader, raised there
            put((None, err))
            return
        put((done, None))

    threading.Thread(target=draw, name="prefetch", daemon=True).start()
    try:
        while True:
            item, err = q.get()
            if err is not None:
                raise err
            if item is done:
                return
            yield item
    finally:                                  # closed or dropped by the reader: the thread ends too
        stop.set()


def to_device(tensors, device: torch.device) -> tuple:
    """Host tensors onto ``device``. On a GPU through pinned memory, without waiting: a plain copy
    from pageable memory waits for all the work already queued on the GPU, so the host could never
    queue work ahead of it (the caching host allocator keeps each pinned buffer until its copy is done)."""
    if device.type != "cuda":
        return tuple(t.to(device) for t in tensors)
    return tuple(_pinned(t).to(device, non_blocking=True) for t in tensors)


def _pinned(t: torch.Tensor) -> torch.Tensor:
    """``t`` in pinned, contiguous host memory (a slice pinned as it is would be copied to
    pageable memory again before its copy to the GPU); tensors already pinned or off the host as they are."""
    if t.device.type != "cpu" or (t.is_pinned() and t.is_contiguous()):
        return t
    return torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t)


def label_info(spec) -> tuple[tuple, torch.dtype]:
    """Per-sample label shape and dtype: () for classes, (seq_len,) for next-token targets."""
    return ((spec.seq_len,) if spec.kind == "text" else ()), torch.int64
