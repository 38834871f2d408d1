"""Data sets held in memory as tensors, with fast random mini-batches.

Images are stored as uint8 (N, C, H, W) and turned into normalised float32 one batch at a
time; text is one int64 vector of token ids, cut into windows on demand.

    digits    scikit-learn's 8x8 handwritten digits (offline default), 1437 train / 360 test
    cifar10   the official python release (cifar-10-batches-py) or an ImageFolder tree
    imagenet  an ImageFolder tree train/<class>/*, val/<class>/*
    text      byte- or char-level tokens of any text file (default: Python's pydoc topics)

Where the files come from on a GPU server: CIFAR-10 is fetched with torchvision's
downloader into ``data_dir`` when ``download=True`` and it is not there yet; ImageNet and a
large text corpus (an LM1B-style file) cannot be fetched and are named paths. :func:`locate`
checks that a data set's files are present and readable without decoding them (and is the
one place a missing CIFAR-10 is downloaded, so a batch of workers can call it once first).

Decoding an ImageFolder tree is slow, so the decoded tensors are cached as a ``.pt`` file
(in ``<data_dir>/.paper_repro_cache/`` when that folder is writable, else in
``$PAPER_REPRO_CACHE_DIR`` or ``~/.cache/paper_repro/``); the second load reads the cache.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from tqdm.auto import tqdm

IMAGE_DATASETS = ("digits", "cifar10", "imagenet")
TEXT_DATASETS = ("text",)
DATASETS = IMAGE_DATASETS + TEXT_DATASETS
SPLITS = ("train", "test")
TEXT_LEVELS = ("byte", "char")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".webp", ".gif", ".tif", ".tiff")
CACHE_VERSION = 1
CIFAR_FILES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)

DOWNLOADABLE = ("cifar10",)
HINTS = {
    "cifar10": "pass --download (download=True in Python and the notebooks) to fetch it into --data-dir "
               "with torchvision, or download CIFAR-10 (python version) from "
               "https://www.cs.toronto.edu/~kriz/cifar.html and point --data-dir at it, or point --data-dir "
               "at an ImageFolder tree train/<class>/*.jpg, test/<class>/*.jpg",
    "imagenet": "point --data-dir at an ImageFolder tree train/<class>/*.JPEG, val/<class>/*.JPEG "
                "(ImageNet from https://image-net.org, validation images sorted into class folders; "
                "its license allows no automatic download)",
    "text": "point --data-dir at a text file (e.g. the LM1B training text for the full profile), or at a "
            "folder with train.txt (and optional test.txt), or leave it out to use the built-in corpus "
            "(Python's pydoc topics)",
}


class DataError(ValueError):
    """Data that is missing, malformed or unreadable; the message names the path and how to get it."""


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
        return self._sample(split, batch_size, n, generator)

    def _sample(self, split, batch_size, n, generator):
        if self.kind == "text":
            while True:
                yield self.batch(split, torch.randint(n, (batch_size,), generator=generator))
        order = torch.empty(0, dtype=torch.long)
        while True:
            while len(order) < batch_size:
                order = torch.cat([order, torch.randperm(n, generator=generator)])
            idx, order = order[:batch_size], order[batch_size:]
            yield self.batch(split, idx)

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
         download: bool = False, seed: int = 0) -> DataSet:
    """Load data set ``name`` (one of DATASETS) into memory.

    ``max_train`` / ``max_test`` keep a class-balanced subset (images) or the first tokens
    (text); ``seed`` picks the digits split, those subsets and the stored order of
    ImageFolder images. ``image_size`` resizes (shorter side) and center-crops images;
    ``data_dir`` is ignored for digits."""
    _check_name_and_download(name, download)
    for key, value in (("max_train", max_train), ("max_test", max_test), ("image_size", image_size)):
        if value is not None:
            _check_positive(key, value)
    if name == "text":
        _check_positive("seq_len", seq_len)
        if level not in TEXT_LEVELS:
            raise ValueError(f"unknown text level {level!r}; valid: {', '.join(TEXT_LEVELS)}")
        return _load_text(data_dir, seq_len, level, max_train, max_test)
    if name == "digits":
        x_tr, y_tr, x_te, y_te, classes, source = _load_digits(seed, max_train, max_test)
    elif name == "cifar10":
        x_tr, y_tr, x_te, y_te, classes, source = _load_cifar10(data_dir, download, max_train, max_test,
                                                                image_size, seed)
    else:
        x_tr, y_tr, x_te, y_te, classes, source = _load_imagefolder(
            name, _existing_dir(name, data_dir), ("val", "test"), max_train, max_test,
            image_size or 224, 256 / 224, seed)
    if image_size is not None and tuple(x_tr.shape[-2:]) != (image_size, image_size):
        x_tr, x_te = _resize_tensor(x_tr, image_size), _resize_tensor(x_te, image_size)
    mean, std = _channel_stats(x_tr)
    return DataSet(name=name, kind="image", x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te,
                   num_classes=len(classes), input_shape=tuple(x_tr.shape[1:]), mean=mean, std=std,
                   source=source, classes=list(classes))


def _check_name_and_download(name, download):
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; valid: {', '.join(DATASETS)}")
    if download and name not in DOWNLOADABLE:
        raise DataError(f"download=True: {name} cannot be downloaded automatically (only "
                        f"{', '.join(DOWNLOADABLE)} can); {HINTS.get(name, 'it is built in')}")


def locate(name: str, data_dir: str | os.PathLike | None = None, *, download: bool = False) -> Path | None:
    """The folder or file ``load(name, data_dir)`` reads, checked to be present and readable
    without decoding it (one file is opened); ``None`` for the built-in data (digits, and text
    without ``data_dir``). With ``download=True`` a missing CIFAR-10 is fetched into ``data_dir``
    first. Raises DataError naming the path tried and how to get the data."""
    _check_name_and_download(name, download)
    if name == "digits" or (name == "text" and data_dir is None):
        return None
    if name == "text":
        path = Path(data_dir).expanduser()
        if not path.exists():
            raise DataError(f"text path {path} does not exist; {HINTS['text']}")
        if path.is_dir():
            if not (path / "train.txt").is_file():
                raise DataError(f"no train.txt in {path}; {HINTS['text']}")
            _check_readable(path / "train.txt", name)
        else:
            _check_readable(path, name)
        return path
    if name == "cifar10":
        if data_dir is None and not download:
            raise DataError(f"cifar10 needs a data directory (none given); {HINTS['cifar10']}")
        root = Path(data_dir if data_dir is not None else "data").expanduser()
        folder = _cifar_pickle_folder(root)
        if folder is not None:
            for f in CIFAR_FILES:
                if not (folder / f).is_file():
                    raise DataError(f"missing CIFAR-10 batch file {folder / f}; {HINTS['cifar10']}")
            _check_readable(folder / "test_batch", name)
            return folder
        if (root / "train").is_dir():
            return _check_imagefolder(name, root, ("test", "val"))
        if download:
            _download_cifar10(root)
            return locate(name, root / "cifar-10-batches-py")
        _existing_dir(name, root)  # raises for a missing or empty folder
        raise DataError(f"no CIFAR-10 found in {root}: expected cifar-10-batches-py/data_batch_1..5 + "
                        f"test_batch or an ImageFolder tree train/<class>/*; {HINTS['cifar10']}")
    return _check_imagefolder(name, _existing_dir(name, data_dir), ("val", "test"))


def _check_readable(path: Path, name: str):
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise DataError(f"cannot read {path} ({e}); {HINTS[name]}") from e


def _check_imagefolder(name, root: Path, test_names) -> Path:
    """train/ and a test folder, each with a class folder holding a readable image."""
    if not (root / "train").is_dir():
        raise DataError(f"no train/ folder in {root}; {HINTS[name]}")
    test_dir = next((root / t for t in test_names if (root / t).is_dir()), None)
    if test_dir is None:
        raise DataError(f"no {' or '.join(t + '/' for t in test_names)} folder in {root}; {HINTS[name]}")
    for split_dir in (root / "train", test_dir):
        image = next((Path(e.path) for c in os.scandir(split_dir) if c.is_dir() and not c.name.startswith(".")
                      for e in os.scandir(c.path) if e.name.lower().endswith(IMAGE_EXTENSIONS)), None)
        if image is None:
            raise DataError(f"no images ({', '.join(IMAGE_EXTENSIONS)}) in the class folders of {split_dir}; "
                            f"{HINTS[name]}")
        _check_readable(image, name)
    return root


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
    tr = tr[_balanced_subset(y[tr].numpy(), max_train, seed)] if max_train else tr
    te = te[_balanced_subset(y[te].numpy(), max_test, seed + 1)] if max_test else te
    return x[tr], y[tr], x[te], y[te], [str(c) for c in d.target_names], "sklearn digits"


def _balanced_subset(labels: np.ndarray, k: int | None, seed: int) -> np.ndarray:
    """Sorted indices of at most ``k`` examples, as equal a share per class as possible."""
    if k is None or k >= len(labels):
        return np.arange(len(labels))
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    quota = np.full(len(classes), k // len(classes))
    quota[: k % len(classes)] += 1
    keep = [rng.choice(np.flatnonzero(labels == c), min(q, int((labels == c).sum())), replace=False)
            for c, q in zip(classes, quota)]
    return np.sort(np.concatenate(keep))


# -- CIFAR-10 -------------------------------------------------------------------------------
def _cifar_pickle_folder(root: Path) -> Path | None:
    """``root`` or ``root/cifar-10-batches-py``, whichever holds the official pickles."""
    return next((f for f in (root, root / "cifar-10-batches-py") if (f / "data_batch_1").is_file()), None)


def _load_cifar10(data_dir, download, max_train, max_test, image_size, seed):
    found = _cifar_pickle_folder(Path(data_dir).expanduser()) if data_dir is not None else None
    folder = found or locate("cifar10", data_dir, download=download)
    if (folder / "data_batch_1").is_file():  # the reader names a missing or corrupt batch file
        return _load_cifar_pickles(folder, max_train, max_test, seed)
    return _load_imagefolder("cifar10", folder, ("test", "val"), max_train, max_test, image_size or 32, 1.0, seed)


def _download_cifar10(root: Path):
    """torchvision's downloader: fetch the archive, check its MD5, unpack cifar-10-batches-py/."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        for train in (True, False):
            torchvision.datasets.CIFAR10(root=str(root), train=train, download=True)
    except Exception as e:  # network, disk, checksum: all end the same way
        url = torchvision.datasets.CIFAR10.url
        raise DataError(f"downloading CIFAR-10 from {url} into {root} failed ({type(e).__name__}: {e}); "
                        f"check the network and free space, or fetch that archive by hand and unpack it "
                        f"into {root}") from e


def _read_cifar_pickle(path: Path):
    try:
        with open(path, "rb") as f:
            d = pickle.load(f, encoding="bytes")
        data = np.asarray(d[b"data"], dtype=np.uint8)
        labels = np.asarray(d[b"labels"], dtype=np.int64)
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(labels) != len(data):
            raise ValueError(f"data has shape {data.shape} and {len(labels)} labels, "
                             f"expected (N, 3072) and N labels")
    except FileNotFoundError as e:
        raise DataError(f"missing CIFAR-10 batch file {path}; {HINTS['cifar10']}") from e
    except Exception as e:
        raise DataError(f"cannot read CIFAR-10 batch file {path} ({type(e).__name__}: {e}); "
                        f"the file is corrupt or not CIFAR-10's python format; {HINTS['cifar10']}") from e
    return data.reshape(-1, 3, 32, 32), labels  # rows hold the R plane, then G, then B


def _load_cifar_pickles(folder: Path, max_train, max_test, seed):
    parts = [_read_cifar_pickle(folder / f"data_batch_{i}") for i in range(1, 6)]
    x_tr, y_tr = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    x_te, y_te = _read_cifar_pickle(folder / "test_batch")
    tr, te = _balanced_subset(y_tr, max_train, seed), _balanced_subset(y_te, max_test, seed + 1)
    classes = [f"class_{i}" for i in range(10)]
    try:
        with open(folder / "batches.meta", "rb") as f:
            classes = [c.decode() for c in pickle.load(f, encoding="bytes")[b"label_names"]]
    except Exception:  # the names are only decoration; the labels are what matter
        pass
    t = torch.from_numpy
    return t(x_tr[tr]), t(y_tr[tr]), t(x_te[te]), t(y_te[te]), classes, str(folder)


# -- ImageFolder trees ----------------------------------------------------------------------
def _existing_dir(name, data_dir) -> Path:
    if data_dir is None:
        raise DataError(f"{name} needs a data directory (none given); {HINTS[name]}")
    root = Path(data_dir).expanduser()
    if not root.exists():
        raise DataError(f"data directory {root} does not exist; {HINTS[name]}")
    if not root.is_dir():
        raise DataError(f"{root} is not a directory; {HINTS[name]}")
    if not any(root.iterdir()):
        raise DataError(f"data directory {root} is empty; {HINTS[name]}")
    return root


def _list_images(name, split_dir: Path, class_names=None):
    """(paths, labels, class names) of an ImageFolder split; classes sorted by folder name."""
    if class_names is None:
        class_names = sorted(p.name for p in split_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not class_names:
            raise DataError(f"{split_dir} has no class folders; expected {split_dir}/<class>/*.jpg; "
                            f"{HINTS[name]}")
    index = {c: i for i, c in enumerate(class_names)}
    paths, labels = [], []
    for c in sorted(p.name for p in split_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if c not in index:
            raise DataError(f"class folder {split_dir / c} is not among the training classes "
                            f"({', '.join(class_names)})")
        files = sorted(e.name for e in os.scandir(split_dir / c)
                       if e.name.lower().endswith(IMAGE_EXTENSIONS) and not e.name.startswith("."))
        paths += [os.path.join(split_dir, c, f) for f in files]
        labels += [index[c]] * len(files)
    if not paths:
        raise DataError(f"no images ({', '.join(IMAGE_EXTENSIONS)}) in the class folders of {split_dir}; "
                        f"{HINTS[name]}")
    return paths, np.asarray(labels, dtype=np.int64), class_names


def _load_imagefolder(name, root: Path, test_names, max_train, max_test, size, resize_ratio, seed):
    """Decode train/ and the first of ``test_names`` under ``root`` (cached after the first time)."""
    if not (root / "train").is_dir():
        raise DataError(f"no train/ folder in {root}; {HINTS[name]}")
    test_dir = next((root / t for t in test_names if (root / t).is_dir()), None)
    if test_dir is None:
        raise DataError(f"no {' or '.join(t + '/' for t in test_names)} folder in {root}; {HINTS[name]}")
    tr_paths, tr_labels, classes = _list_images(name, root / "train")
    te_paths, te_labels, _ = _list_images(name, test_dir, classes)
    rng = np.random.default_rng(seed)  # store in a seeded random order: folders are sorted by class
    tr = rng.permutation(_balanced_subset(tr_labels, max_train, seed))
    te = rng.permutation(_balanced_subset(te_labels, max_test, seed + 1))
    tr_paths, te_paths = [tr_paths[i] for i in tr], [te_paths[i] for i in te]
    tr_labels, te_labels = tr_labels[tr], te_labels[te]

    files = [os.path.relpath(p, root) for p in tr_paths + te_paths]
    key = repr((CACHE_VERSION, str(root.resolve()), name, size, resize_ratio, seed, max_train, max_test, files))
    key = hashlib.sha1(key.encode()).hexdigest()[:16]
    tag = f"{name}-{max_train or 'all'}-{max_test or 'all'}-{size}px-{key}.pt"
    cached = _read_cache(root, tag)
    if cached is not None:
        x_tr, x_te = cached
    else:
        x_tr = _decode_all(tr_paths, size, resize_ratio, f"{name} train")
        x_te = _decode_all(te_paths, size, resize_ratio, f"{name} {test_dir.name}")
        _write_cache(root, tag, x_tr, x_te)
    return x_tr, torch.from_numpy(tr_labels), x_te, torch.from_numpy(te_labels), classes, str(root)


def _decode_image(path: str, size: int, resize_ratio: float) -> np.ndarray:
    """(H, W, 3) uint8: shorter side resized to size*resize_ratio, then a size x size center crop."""
    from PIL import Image
    try:
        with Image.open(path) as im:
            w, h = im.size
            if (w, h) != (size, size):
                short = round(size * resize_ratio)
                if im.format == "JPEG":
                    im.draft("RGB", (short, short))  # let libjpeg decode at a reduced scale when it can
                    w, h = im.size
                im = im.convert("RGB")
                if min(w, h) != short:  # same rule as torchvision.transforms.Resize(int)
                    w, h = (short, int(short * h / w)) if w <= h else (int(short * w / h), short)
                    im = im.resize((w, h), Image.BILINEAR)
                top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))
                im = im.crop((left, top, left + size, top + size))
            else:
                im = im.convert("RGB")
            return np.asarray(im, dtype=np.uint8)
    except Exception as e:
        raise DataError(f"cannot read image {path} ({type(e).__name__}: {e}); "
                        f"remove or replace the corrupt file") from e


def _decode_all(paths, size, resize_ratio, desc) -> torch.Tensor:
    out = np.empty((len(paths), size, size, 3), dtype=np.uint8)
    if out.nbytes > 16 * 2 ** 30:
        warnings.warn(f"{desc}: {len(paths)} images need {out.nbytes / 2 ** 30:.0f} GiB in memory; "
                      f"pass max_train / max_test for a subset")

    def work(i):
        out[i] = _decode_image(paths[i], size, resize_ratio)

    workers = min(8, (os.cpu_count() or 1) * 2)
    with ThreadPoolExecutor(workers) as pool:  # PIL releases the GIL while decoding
        for _ in tqdm(pool.map(work, range(len(paths))), total=len(paths), desc=f"decoding {desc}",
                      unit="img", mininterval=1.0):
            pass
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()


def _cache_dirs(root: Path) -> list[Path]:
    dirs = []
    if os.access(root, os.W_OK) and root.stat().st_mode & 0o222:  # a folder marked read-only stays so
        dirs.append(root / ".paper_repro_cache")
    dirs.append(Path(os.environ.get("PAPER_REPRO_CACHE_DIR", "~/.cache/paper_repro")).expanduser())
    return dirs


def _read_cache(root: Path, tag: str):
    for d in _cache_dirs(root):
        path = d / tag
        if path.is_file():
            try:
                c = torch.load(path, weights_only=True)
                return c["x_train"], c["x_test"]
            except Exception as e:
                warnings.warn(f"ignoring unreadable cache file {path} ({e}); decoding again")
    return None


def _write_cache(root: Path, tag: str, x_train, x_test):
    for d in _cache_dirs(root):
        try:
            d.mkdir(parents=True, exist_ok=True)
            tmp = d / f"{tag}.{os.getpid()}.tmp"
            torch.save({"x_train": x_train, "x_test": x_test}, tmp)
            os.replace(tmp, d / tag)
            return d / tag
        except OSError:
            continue
    warnings.warn(f"could not write a cache of the decoded images of {root}; the next load decodes again")
    return None


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


def _load_text(data_dir, seq_len, level, max_train, max_test) -> DataSet:
    if data_dir is None:
        from pydoc_data.topics import topics
        text = "\n".join(topics[k] for k in sorted(topics))
        corpus = text.encode("utf-8") if level == "byte" else text
        train, test, source = corpus[: int(len(corpus) * 0.9)], corpus[int(len(corpus) * 0.9):], "pydoc_data.topics"
    else:
        path = Path(data_dir).expanduser()
        if not path.exists():
            raise DataError(f"text path {path} does not exist; {HINTS['text']}")
        if path.is_dir():
            if not (path / "train.txt").is_file():
                raise DataError(f"no train.txt in {path}; {HINTS['text']}")
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
