"""Data sets held in memory as tensors, with fast random mini-batches.

Images are stored as uint8 (N, C, H, W) and turned into normalised float32 one batch at a
time; text is one int64 vector of token ids, cut into windows on demand.

    digits    scikit-learn's 8x8 handwritten digits (offline default), 1437 train / 360 test
    cifar10   the official python release (cifar-10-batches-py) or an ImageFolder tree;
              ``download=True`` fetches the python release with torchvision when it is absent
    imagenet  an ImageFolder tree train/<class>/*, val/<class>/*
    text      byte- or char-level tokens of any text file, or of a built-in corpus
              (:mod:`paper_repro.corpora`: ``corpus="pydoc"``, the default, or ``"stdlib"``)

Finding, downloading and decoding the files is :mod:`paper_repro.datafiles`' work
(:func:`locate` is re-exported here); ImageNet and a large text corpus (an LM1B-style file)
cannot be fetched and are paths the user gives.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from . import corpora
from .datafiles import (  # noqa: F401  (DataError, HINTS, locate and the name lists are part of this API)
    DATASETS, DOWNLOADABLE, HINTS, IMAGE_DATASETS, TEXT_DATASETS, DataError, balanced_subset,
    check_data_dir, check_name_and_download, existing_dir, load_cifar10, load_imagefolder, locate)

SPLITS = ("train", "test")
TEXT_LEVELS = ("byte", "char")


@dataclass(frozen=True)
class InputSpec:
    """What a model takes, without any data: the four fields a :class:`DataSet` also has, for
    inputs described by shape alone (a pipeline's synthetic inputs, estimate's micro-batch)."""
    kind: str                       # 'image' | 'text'
    num_classes: int                # classes, or vocabulary size for text
    input_shape: tuple              # (C, H, W) for images, (seq_len,) for text
    seq_len: int | None = None      # text only

    @classmethod
    def text(cls, num_classes: int, seq_len: int) -> InputSpec:
        """Windows of ``seq_len`` token ids from a vocabulary of ``num_classes``."""
        return cls("text", num_classes, (seq_len,), seq_len)

    @classmethod
    def image(cls, num_classes: int, shape: tuple) -> InputSpec:
        """Images of ``shape`` (C, H, W) in ``num_classes`` classes."""
        return cls("image", num_classes, tuple(shape))


@dataclass(eq=False)
class DataSet:
    name: str                       # 'digits' | 'cifar10' | 'imagenet' | 'text'
    kind: str                       # 'image' | 'text'
    x_train: torch.Tensor           # images: uint8 (N, C, H, W); text: int64 token ids (L,)
    y_train: torch.Tensor | None    # int64 labels (None for text)
    x_test: torch.Tensor
    y_test: torch.Tensor | None
    num_classes: int                # classes, or vocabulary size for text
    input_shape: tuple              # (C, H, W) for images, (seq_len,) for text
    mean: tuple = ()                # per-channel mean of the training images, in [0, 1] units
    std: tuple = ()                 # per-channel standard deviation, same units
    seq_len: int | None = None      # text only
    vocab: list[str] | None = None  # text only: id -> symbol
    source: str = ""                # where the data came from, for figure titles
    classes: list[str] | None = None  # images: label -> class name, where known

    # -- access ---------------------------------------------------------------------------
    def _split(self, split: str) -> tuple[torch.Tensor, torch.Tensor | None]:
        if split == "train":
            return self.x_train, self.y_train
        if split == "test":
            return self.x_test, self.y_test
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")

    def num_examples(self, split: str) -> int:
        """Images in ``split``, or for text the number of valid window start positions."""
        x, _ = self._split(split)
        if self.kind == "text":
            return max(len(x) - self.seq_len, 0)
        return len(x)

    def batch(self, split: str, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Examples ``idx`` (images) or windows starting at ``idx`` (text) as (x, y).

        Images come back as float32, normalised with ``mean`` and ``std``; text as int64
        (B, seq_len) tokens x with targets y = the next tokens (x shifted by one)."""
        x, y = self._split(split)
        idx = torch.as_tensor(idx, dtype=torch.long, device=x.device)
        if self.kind == "text":
            pos = idx[:, None] + torch.arange(self.seq_len + 1, device=x.device)
            window = x[pos]
            return window[:, :-1], window[:, 1:]
        mean = torch.tensor(self.mean, dtype=torch.float32, device=x.device).view(1, -1, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32, device=x.device).view(1, -1, 1, 1)
        xb = x[idx].float().mul_(1.0 / (255.0 * std)).sub_(mean / std)
        return xb, y[idx]

    def sampler(self, split: str, batch_size: int,
                generator: torch.Generator | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Random mini-batches forever, deterministic given ``generator``.

        Images: shuffled epochs (every example once per epoch; batches run across epoch
        boundaries so all have ``batch_size`` examples). Text: window starts drawn
        uniformly with replacement."""
        _check_positive("batch_size", batch_size)
        n = self.num_examples(split)
        if n == 0:
            raise ValueError(f"split {split!r} of {self.name!r} has no examples to sample")
        return (self.batch(split, idx) for idx in self._indices(batch_size, n, generator))

    def index_sampler(self, split: str, batch_size: int,
                      generator: torch.Generator | None = None) -> Iterator[torch.Tensor]:
        """The indices of the batches :meth:`sampler` draws with the same ``generator``, without
        reading them (a reader that skips batches, or resumes, draws these)."""
        _check_positive("batch_size", batch_size)
        n = self.num_examples(split)
        if n == 0:
            raise ValueError(f"split {split!r} of {self.name!r} has no examples to sample")
        return self._indices(batch_size, n, generator)

    def _indices(self, batch_size, n, generator):
        if self.kind == "text":
            while True:
                yield torch.randint(n, (batch_size,), generator=generator)
        order = torch.empty(0, dtype=torch.long)
        while True:
            while len(order) < batch_size:
                order = torch.cat([order, torch.randperm(n, generator=generator)])
            idx, order = order[:batch_size], order[batch_size:]
            yield idx

    def eval_batches(self, split: str = "test", batch_size: int = 512,
                     max_examples: int | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Deterministic batches covering ``split`` in order (for text: non-overlapping
        windows), stopping after ``max_examples`` examples / windows if given."""
        _check_positive("batch_size", batch_size)
        if max_examples is not None:
            _check_positive("max_examples", max_examples)
        x, _ = self._split(split)
        if self.kind == "text":
            starts = torch.arange(0, self.num_examples(split), self.seq_len)
        else:
            starts = torch.arange(len(x))
        starts = starts[:max_examples] if max_examples is not None else starts
        return (self.batch(split, starts[i:i + batch_size]) for i in range(0, len(starts), batch_size))

    # -- variants -------------------------------------------------------------------------
    def with_random_labels(self, seed: int) -> DataSet:
        """Same images, every label replaced by one drawn uniformly at random (fixed per example)."""
        if self.kind != "image":
            raise ValueError(f"random labels need an image data set, {self.name!r} is {self.kind}")
        g = torch.Generator().manual_seed(int(seed))
        y_train = torch.randint(self.num_classes, (len(self.x_train),), generator=g)
        y_test = torch.randint(self.num_classes, (len(self.x_test),), generator=g)
        return dataclasses.replace(self, y_train=y_train.to(self.y_train.device),
                                   y_test=y_test.to(self.y_test.device),
                                   source=f"{self.source} (random labels, seed {seed})")

    def to(self, device) -> DataSet:
        """A copy with all tensors on ``device`` (batches are then cut there)."""
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return dataclasses.replace(self, x_train=move(self.x_train), y_train=move(self.y_train),
                                   x_test=move(self.x_test), y_test=move(self.y_test))

    def decode(self, ids) -> str:
        """Text for token ids (text data sets only)."""
        if self.kind != "text":
            raise ValueError(f"decode needs a text data set, {self.name!r} is {self.kind}")
        ids = [int(i) for i in torch.as_tensor(ids).flatten()]
        if len(self.vocab) == 256 and self.vocab == BYTE_VOCAB:
            return bytes(ids).decode("utf-8", errors="replace")
        return "".join(self.vocab[i] for i in ids)

    def __repr__(self) -> str:
        return (f"DataSet({self.name!r}, {self.kind}, train={self.num_examples('train')}, "
                f"test={self.num_examples('test')}, num_classes={self.num_classes}, "
                f"input_shape={self.input_shape}, source={self.source!r})")


BYTE_VOCAB = [bytes([i]).decode("latin-1") for i in range(256)]


# -- entry point ----------------------------------------------------------------------------
def load(name: str, data_dir: str | os.PathLike | None = None, *, seq_len: int = 64, level: str = "byte",
         max_train: int | None = None, max_test: int | None = None, image_size: int | None = None,
         download: bool = False, seed: int = 0, corpus: str | None = None,
         corpus_sha256: str | None = None) -> DataSet:
    """Load data set ``name`` (one of DATASETS) into memory.

    ``max_train`` / ``max_test`` keep a class-balanced subset (images) or the first tokens
    (text); ``seed`` picks the digits split, those subsets and the stored order of
    ImageFolder images. ``image_size`` resizes (shorter side) and center-crops images;
    ``data_dir`` is ignored for digits. Text without ``data_dir`` is a built-in ``corpus``
    (:data:`paper_repro.corpora.CORPORA`; default ``"pydoc"``); with ``corpus_sha256``, a corpus
    whose hash differs gives a :class:`~paper_repro.corpora.CorpusMismatch` warning naming both."""
    check_name_and_download(name, download)
    check_data_dir(data_dir)
    if (corpus is not None or corpus_sha256 is not None) and name != "text":
        raise ValueError(f"corpus and corpus_sha256 are for the text data set, not {name!r}")
    if corpus is not None and data_dir is not None:
        raise ValueError(f"give either data_dir (a text file or folder) or corpus (built in: "
                         f"{', '.join(corpora.CORPORA)}), not both; got data_dir={str(data_dir)!r}, corpus={corpus!r}")
    if corpus is not None and corpus not in corpora.CORPORA:
        raise ValueError(f"unknown text corpus {corpus!r}; valid: {', '.join(corpora.CORPORA)}")
    if corpus_sha256 is not None and data_dir is not None:
        raise ValueError("corpus_sha256 checks a built-in corpus; it cannot be given with data_dir")
    for key, value in (("max_train", max_train), ("max_test", max_test), ("image_size", image_size)):
        if value is not None:
            _check_positive(key, value)
    if name == "text":
        _check_positive("seq_len", seq_len)
        if level not in TEXT_LEVELS:
            raise ValueError(f"unknown text level {level!r}; valid: {', '.join(TEXT_LEVELS)}")
        return _load_text(data_dir, seq_len, level, max_train, max_test, corpus, corpus_sha256)
    if name == "digits":
        x_tr, y_tr, x_te, y_te, classes, source = _load_digits(seed, max_train, max_test)
    elif name == "cifar10":
        x_tr, y_tr, x_te, y_te, classes, source = load_cifar10(data_dir, download, max_train, max_test,
                                                                image_size, seed)
    else:
        x_tr, y_tr, x_te, y_te, classes, source = load_imagefolder(
            name, existing_dir(name, data_dir), ("val", "test"), max_train, max_test,
            image_size or 224, 256 / 224, seed)
    if image_size is not None and tuple(x_tr.shape[-2:]) != (image_size, image_size):
        x_tr, x_te = _resize_tensor(x_tr, image_size), _resize_tensor(x_te, image_size)
    mean, std = _channel_stats(x_tr)
    return DataSet(name=name, kind="image", x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te,
                   num_classes=len(classes), input_shape=tuple(x_tr.shape[1:]), mean=mean, std=std,
                   source=source, classes=list(classes))



def _check_positive(key, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{key} must be a positive integer, got {value!r}")


# -- digits ---------------------------------------------------------------------------------
def _load_digits(seed, max_train, max_test):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = torch.from_numpy(np.round(d.images * (255.0 / 16.0)).astype(np.uint8)).unsqueeze(1)
    y = torch.from_numpy(d.target.astype(np.int64))
    tr, te = train_test_split(np.arange(len(y)), test_size=360, stratify=d.target, random_state=seed)
    tr, te = torch.from_numpy(tr), torch.from_numpy(te)
    tr = tr[balanced_subset(y[tr].numpy(), max_train, seed)] if max_train else tr
    te = te[balanced_subset(y[te].numpy(), max_test, seed + 1)] if max_test else te
    return x[tr], y[tr], x[te], y[te], [str(c) for c in d.target_names], "sklearn digits"



# -- image helpers --------------------------------------------------------------------------
def _resize_tensor(x: torch.Tensor, size: int) -> torch.Tensor:
    """Resize uint8 (N, C, H, W) so the shorter side is ``size``, then center-crop to size x size."""
    h, w = x.shape[-2:]
    nh, nw = (size, max(size, round(size * w / h))) if h <= w else (max(size, round(size * h / w)), size)
    out = []
    for chunk in x.split(4096):
        r = F.interpolate(chunk.float(), size=(nh, nw), mode="bilinear", align_corners=False,
                          antialias=(nh < h))
        top, left = (nh - size) // 2, (nw - size) // 2
        out.append(r[..., top:top + size, left:left + size].round_().clamp_(0, 255).to(torch.uint8))
    return torch.cat(out)


def _channel_stats(x: torch.Tensor, max_images: int = 10_000) -> tuple[tuple, tuple]:
    """Per-channel mean and standard deviation of uint8 images, in [0, 1] units, over at
    most ``max_images`` evenly spaced images (exact for smaller sets; a second saved per load)."""
    x = x[:: -(-len(x) // max_images)]
    c = x.shape[1]
    s = torch.zeros(c, dtype=torch.float64)
    s2 = torch.zeros(c, dtype=torch.float64)
    for chunk in x.split(4096):
        v = chunk.transpose(0, 1).reshape(c, -1).double()
        s += v.sum(1)
        s2 += (v * v).sum(1)
    n = x.numel() // c
    mean = s / n
    std = (s2 / n - mean * mean).clamp_min(0).sqrt()
    mean, std = mean / 255.0, (std / 255.0).clamp_min(1e-3)
    return tuple(round(float(m), 6) for m in mean), tuple(round(float(v), 6) for v in std)


# -- text -----------------------------------------------------------------------------------
def _read_text_file(path: Path, level: str):
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"cannot read text file {path} ({e}); {HINTS['text']}") from e
    if level == "byte":
        return raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not UTF-8 text ({e}); use level='byte' or convert the file") from e


def _load_text(data_dir, seq_len, level, max_train, max_test, corpus=None, corpus_sha256=None) -> DataSet:
    if data_dir is None:
        built_in = corpora.load(corpus or "pydoc", corpus_sha256)
        train, test = built_in.train, built_in.test
        if level == "char" and built_in.name == "pydoc":  # its 90% cut counted in characters
            text = (train + test).decode("utf-8")
            cut = int(len(text) * corpora.PYDOC_TRAIN_FRACTION)
            train, test = text[:cut], text[cut:]
        elif level == "char":  # whole files on each side: both decode, where every file is UTF-8
            try:
                train, test = train.decode("utf-8"), test.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"the {built_in.name} corpus in {built_in.root} is not all UTF-8 text ({e}); "
                                "use level='byte'") from e
        source = "pydoc_data.topics" if built_in.name == "pydoc" else built_in.source
    else:
        path = locate("text", data_dir)  # present and readable, or a DataError saying how to fix it
        if path.is_dir():
            train = _read_text_file(path / "train.txt", level)
            test_file = next((path / f for f in ("test.txt", "valid.txt", "val.txt") if (path / f).is_file()), None)
            if test_file is not None:
                test = _read_text_file(test_file, level)
            else:
                train, test = train[: int(len(train) * 0.9)], train[int(len(train) * 0.9):]
        else:
            corpus = _read_text_file(path, level)
            train, test = corpus[: int(len(corpus) * 0.9)], corpus[int(len(corpus) * 0.9):]
        source = str(path)
    train, test = train[:max_train], test[:max_test]
    for split, part in (("train", train), ("test", test)):
        if len(part) < seq_len + 1:
            raise DataError(f"the {split} text of {source} has {len(part)} {level}s, fewer than "
                            f"seq_len + 1 = {seq_len + 1}; use a longer text or a smaller seq_len")
    if level == "byte":
        vocab = BYTE_VOCAB
        enc = lambda b: torch.from_numpy(np.frombuffer(b, dtype=np.uint8).astype(np.int64))  # noqa: E731
    else:
        vocab = sorted(set(train) | set(test))
        lookup = {ch: i for i, ch in enumerate(vocab)}
        enc = lambda s: torch.tensor([lookup[ch] for ch in s], dtype=torch.long)  # noqa: E731
    return DataSet(name="text", kind="text", x_train=enc(train), y_train=None, x_test=enc(test), y_test=None,
                   num_classes=len(vocab), input_shape=(seq_len,), seq_len=seq_len, vocab=list(vocab),
                   source=f"{source} ({level}-level)")
