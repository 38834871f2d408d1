"""``paper-repro bench overhead``: the learner's backprop step vs a plain PyTorch loop.

Both sides train the same model (two copies with identical weights) on the same batch
with the same optimizer. The *plain* side is the loop one would write by hand::

    opt.zero_grad(set_to_none=True); loss = cross_entropy(net(x), y)
    loss.backward(); opt.step(); loss.item()

The *learner* side is the body of :func:`paper_repro.train.train`'s loop with method
``backprop``: ``losses = learner.losses(x, y)``, one ``float`` per loss, ``sum(losses)
.backward()``, ``opt.step()``. Repetitions are interleaved (plain, learner, learner,
plain, ...) so drifts in machine load hit both alike; the reported ratio is the median
over repetitions of learner time / plain time. The goal is a ratio <= 1.05.
"""
from __future__ import annotations

import copy
import json
import statistics
import time

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from . import methods, models, train

DEFAULT_SHAPES = {"mlp": dict(depth=4, width=1024, in_dim=3072), "transformer": dict(d_model=128, n_layers=4),
                  "resnet18": dict(width=16)}


def plain_step(net: models.BlockNet, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    """One hand-written training step of ``net``."""
    opt.zero_grad(set_to_none=True)
    logits = net(x)
    if net.task == "lm":
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    else:
        loss = F.cross_entropy(logits, y)
    loss.backward()
    opt.step()
    return loss.item()


def learner_step(learner: methods.Learner, opt: torch.optim.Optimizer, x: torch.Tensor,
                 y: torch.Tensor) -> list[float]:
    """One training step exactly as :func:`paper_repro.train.train` takes it."""
    opt.zero_grad(set_to_none=True)
    losses = learner.losses(x, y)
    values = [float(v.detach()) for v in losses]
    sum(losses).backward()
    opt.step()
    return values


def ratio_summary(plain_s: list[float], learner_s: list[float]) -> dict:
    """Median seconds of each side and the median of the per-repetition ratios."""
    if len(plain_s) != len(learner_s) or not plain_s:
        raise ValueError(f"need equally many (>= 1) timings of each side, got {len(plain_s)} and {len(learner_s)}")
    ratios = [b / a for a, b in zip(plain_s, learner_s)]
    return {"plain_s": statistics.median(plain_s), "learner_s": statistics.median(learner_s),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "repeats": len(ratios)}


def _example_batch(model: str, net: models.BlockNet, batch_size: int, kw: dict, device: str):
    g = torch.Generator().manual_seed(0)
    if model == "transformer":
        vocab, seq = kw.get("vocab_size", 256), kw.get("seq_len", 64)
        x = torch.randint(vocab, (batch_size, seq), generator=g)
        y = torch.randint(vocab, (batch_size, seq), generator=g)
    elif model == "mlp":
        x = torch.randn(batch_size, kw.get("in_dim", 64), generator=g)
        y = torch.randint(kw.get("num_classes", 10), (batch_size,), generator=g)
    else:
        size = 32 if kw.get("small_input", True) else 224
        x = torch.randn(batch_size, kw.get("in_channels", 3), size, size, generator=g)
        y = torch.randint(kw.get("num_classes", 10), (batch_size,), generator=g)
    return x.to(device), y.to(device)


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`overhead`; ``partial`` is the summary of the repetitions that
    completed on both sides (None before the first pair)."""

    def __init__(self, message: str, partial: dict | None):
        super().__init__(message)
        self.partial = partial


def overhead(model: str = "mlp", model_kwargs: dict | None = None, batch_size: int = 128, steps: int = 10,
             repeats: int = 15, warmup: int = 3, lr: float = 1e-3, device: str = "cpu",
             progress: bool = False) -> dict:
    """Time ``steps`` steps per side, ``repeats`` interleaved times; see :func:`ratio_summary`.

    Ctrl-C raises :class:`BenchInterrupted` carrying the summary of the repetitions done."""
    for key, value in (("batch_size", batch_size), ("steps", steps), ("repeats", repeats)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{key} must be a positive integer, got {value!r}")
    train.check_device(device)
    if model_kwargs is not None and not isinstance(model_kwargs, dict):
        raise ValueError(f"model_kwargs must be a dict, got {model_kwargs!r}")
    kw = dict(DEFAULT_SHAPES.get(model, {}), **(model_kwargs or {}))
    torch.manual_seed(0)
    net = models.build(model, **kw).to(device)
    plain_net = copy.deepcopy(net)
    learner = methods.build(net, "backprop")
    plain_opt = torch.optim.Adam(plain_net.parameters(), lr=lr)
    learner_opt = torch.optim.Adam(learner.parameters(), lr=lr)
    x, y = _example_batch(model, net, batch_size, kw, device)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    sides = {"plain": lambda: plain_step(plain_net, plain_opt, x, y),
             "learner": lambda: learner_step(learner, learner_opt, x, y)}
    for _ in range(warmup):
        for fn in sides.values():
            fn()
    times = {"plain": [], "learner": []}

    def summarize():
        done = min(map(len, times.values()))
        summary = ratio_summary(times["plain"][:done], times["learner"][:done])
        summary.update(model=model, model_kwargs=kw, batch_size=batch_size, steps=steps, device=device)
        return summary

    bar = tqdm(range(repeats), desc="overhead", unit="rep", disable=not progress)
    try:
        for r in bar:
            for name in (("plain", "learner") if r % 2 == 0 else ("learner", "plain")):
                sync()
                t0 = time.perf_counter()
                for _ in range(steps):
                    sides[name]()
                sync()
                times[name].append((time.perf_counter() - t0) / steps)
    except KeyboardInterrupt:
        done = min(map(len, times.values()))
        raise BenchInterrupted(f"{done} of {repeats} repetitions done",
                               summarize() if done else None) from None
    finally:
        bar.close()
    return summarize()


def format_overhead(r: dict) -> str:
    """The summary of :func:`overhead` as four lines of text."""
    return "\n".join([
        f"model {r['model']} {json.dumps(r['model_kwargs'])}, batch {r['batch_size']}, device {r['device']}, "
        f"{r['repeats']} interleaved repetitions of {r['steps']} steps, {torch.get_num_threads()} threads",
        f"plain PyTorch loop   {1e3 * r['plain_s']:9.3f} ms/step (median)",
        f"learner (backprop)   {1e3 * r['learner_s']:9.3f} ms/step (median)",
        f"ratio learner/plain  {r['ratio']:9.3f}  (median; range {r['ratio_min']:.3f}-{r['ratio_max']:.3f})"])
