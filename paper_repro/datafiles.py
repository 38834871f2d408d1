"""Data sets on disk: where they are, CIFAR-10's download, and reading image files.

* :func:`locate` checks that a data set's files are present and readable without decoding
  them; it is also the one place a missing CIFAR-10 is downloaded (torchvision's downloader,
  MD5-checked), so a batch of workers can call it once first. ImageNet and text corpora
  cannot be downloaded: they are paths the user gives, and errors say how to get them.
* CIFAR-10's official python pickles (``cifar-10-batches-py``) are read as they are.
* ImageFolder trees (``train/<class>/*.jpg``) are decoded in threads and the decoded tensors
  cached as a ``.pt`` file (in ``<data_dir>/.paper_repro_cache/`` when that folder is
  writable, else in ``$PAPER_REPRO_CACHE_DIR`` or ``~/.cache/paper_repro/``); the second
  load reads the cache.

Every loader returns ``(x_train, y_train, x_test, y_test, class names, source)`` with uint8
(N, C, H, W) images; :mod:`paper_repro.data` turns them into a ``DataSet``.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
import torchvision
from tqdm.auto import tqdm

from .names import DATASETS, IMAGE_DATASETS, TEXT_DATASETS  # noqa: F401  (re-exported by paper_repro.data)
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


# -- where the data is ----------------------------------------------------------------------
def check_data_dir(data_dir) -> None:
    """A TypeError naming ``data_dir`` unless it is a path (str or os.PathLike) or None."""
    if data_dir is not None and not isinstance(data_dir, (str, os.PathLike)):
        raise TypeError(f"data_dir must be a path (a str or os.PathLike) or None, got {data_dir!r} "
                        f"({type(data_dir).__name__}); the other options of data.load are keyword-only "
                        f"(e.g. seed=42)")


def check_name_and_download(name, download):
    """A known data set name, and ``download`` only for one that can be downloaded."""
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; valid: {', '.join(DATASETS)}")
    if download and name not in DOWNLOADABLE:
        raise DataError(f"download=True: {name} cannot be downloaded automatically (only "
                        f"{', '.join(DOWNLOADABLE)} can); {HINTS.get(name, 'it is built in')}")


def locate(name: str, data_dir: str | os.PathLike | None = None, *, download: bool = False) -> Path | None:
    """The folder or file ``data.load(name, data_dir)`` reads, checked to be present and readable
    without decoding it (one file is opened); ``None`` for the built-in data (digits, and text
    without ``data_dir``). With ``download=True`` a missing CIFAR-10 is fetched into ``data_dir``
    first. Raises DataError naming the path tried and how to get the data."""
    check_name_and_download(name, download)
    check_data_dir(data_dir)
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
        existing_dir(name, root)  # raises for a missing or empty folder
        raise DataError(f"no CIFAR-10 found in {root}: expected cifar-10-batches-py/data_batch_1..5 + "
                        f"test_batch or an ImageFolder tree train/<class>/*; {HINTS['cifar10']}")
    return _check_imagefolder(name, existing_dir(name, data_dir), ("val", "test"))


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




# -- subsets --------------------------------------------------------------------------------
def balanced_subset(labels: np.ndarray, k: int | None, seed: int) -> np.ndarray:
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


def load_cifar10(data_dir, download, max_train, max_test, image_size, seed):
    """The official pickles when ``data_dir`` holds them, else an ImageFolder tree there, else
    (with ``download``) the pickles fetched into ``data_dir``."""
    found = _cifar_pickle_folder(Path(data_dir).expanduser()) if data_dir is not None else None
    folder = found or locate("cifar10", data_dir, download=download)
    if (folder / "data_batch_1").is_file():  # the reader names a missing or corrupt batch file
        return _load_cifar_pickles(folder, max_train, max_test, seed)
    return load_imagefolder("cifar10", folder, ("test", "val"), max_train, max_test, image_size or 32, 1.0, seed)


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
    tr, te = balanced_subset(y_tr, max_train, seed), balanced_subset(y_te, max_test, seed + 1)
    classes = [f"class_{i}" for i in range(10)]
    try:
        with open(folder / "batches.meta", "rb") as f:
            classes = [c.decode() for c in pickle.load(f, encoding="bytes")[b"label_names"]]
    except Exception:  # the names are only decoration; the labels are what matter
        pass
    t = torch.from_numpy
    return t(x_tr[tr]), t(y_tr[tr]), t(x_te[te]), t(y_te[te]), classes, str(folder)


# -- ImageFolder trees ----------------------------------------------------------------------
def existing_dir(name, data_dir) -> Path:
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


def load_imagefolder(name, root: Path, test_names, max_train, max_test, size, resize_ratio, seed):
    """Decode train/ and the first of ``test_names`` under ``root`` (cached after the first time)."""
    if not (root / "train").is_dir():
        raise DataError(f"no train/ folder in {root}; {HINTS[name]}")
    test_dir = next((root / t for t in test_names if (root / t).is_dir()), None)
    if test_dir is None:
        raise DataError(f"no {' or '.join(t + '/' for t in test_names)} folder in {root}; {HINTS[name]}")
    tr_paths, tr_labels, classes = _list_images(name, root / "train")
    te_paths, te_labels, _ = _list_images(name, test_dir, classes)
    rng = np.random.default_rng(seed)  # store in a seeded random order: folders are sorted by class
    tr = rng.permutation(balanced_subset(tr_labels, max_train, seed))
    te = rng.permutation(balanced_subset(te_labels, max_test, seed + 1))
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


_SHOW_PROGRESS = [True]   # whether decoding draws a progress bar (see progress_bars)


def show_progress_bars(show: bool) -> bool:
    """Whether decoding an image folder draws a progress bar from now on; returns the setting before."""
    saved, _SHOW_PROGRESS[0] = _SHOW_PROGRESS[0], bool(show)
    return saved


@contextlib.contextmanager
def progress_bars(show: bool):
    """Within it, decoding an image folder draws its progress bar only if ``show`` (a command's
    ``--no-progress`` reaches the data loading through it)."""
    saved = show_progress_bars(show)
    try:
        yield
    finally:
        show_progress_bars(saved)


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
                      unit="img", mininterval=1.0, disable=not _SHOW_PROGRESS[0]):
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
