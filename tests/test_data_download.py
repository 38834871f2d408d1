"""Data the way a GPU-server user has it: CIFAR-10 fetched by torchvision's downloader,
ImageNet and text corpora as named paths, and :func:`data.locate` checking them cheaply.

The download runs offline: only the network calls inside torchvision's ``download_url``
(``_get_redirect_url``, a HEAD request, and ``_urlretrieve``, the fetch) are replaced, the
fetch by a copy of a tiny archive in the official format that the test builds; torchvision's own MD5 checks (given the archive's and
files' real MD5s) and unpacking run unchanged, and the loader then reads what was unpacked.
"""
import hashlib
import os
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.datasets.utils as tv_utils
from torchvision.datasets import CIFAR10

from paper_repro import data

BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


@pytest.fixture(autouse=True)
def no_network(tmp_path, monkeypatch):
    """Caches in tmp; torchvision's redirect lookup answers without the network."""
    monkeypatch.setenv("PAPER_REPRO_CACHE_DIR", str(tmp_path / "user_cache"))
    monkeypatch.setattr(tv_utils, "_get_redirect_url", lambda url, max_hops=3: url)


class Py2Str(bytes):
    """A Python 2 ``str``, as the official CIFAR-10 pickles hold their keys and names."""


class Py2Pickler(pickle._Pickler):
    """Protocol 2 with ``Py2Str`` written as BINSTRING, like Python 2's pickle: it loads as
    bytes with ``encoding="bytes"`` (this project's reader) and as str with
    ``encoding="latin1"`` (torchvision's)."""
    dispatch = dict(pickle._Pickler.dispatch)

    def save_py2str(self, obj):
        n = len(obj)
        head = pickle.SHORT_BINSTRING + bytes([n]) if n < 256 else pickle.BINSTRING + struct.pack("<i", n)
        self.write(head + bytes(obj))
        self.memoize(obj)

    dispatch[Py2Str] = save_py2str


def _dump_py2(obj, path: Path):
    with open(path, "wb") as f:
        Py2Pickler(f, protocol=2).dump(obj)


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture
def fake_cifar_archive(tmp_path, monkeypatch):
    """A cifar-10-python.tar.gz of 7 images per batch file, served by a fake network fetch.

    Returns (fetched URLs, images written {batch: (N, 32, 32, 3) uint8}, labels written)."""
    rng = np.random.default_rng(3)
    src = tmp_path / "archive_src" / "cifar-10-batches-py"
    src.mkdir(parents=True)
    images, labels = {}, {}
    for name in BATCHES:
        imgs = rng.integers(0, 256, (7, 32, 32, 3), dtype=np.uint8)
        labs = [int(v) for v in rng.integers(0, 10, 7)]
        # the official layout: one row per image, the R plane, then G, then B
        _dump_py2({Py2Str(b"batch_label"): Py2Str(name.encode()), Py2Str(b"labels"): labs,
                   Py2Str(b"data"): imgs.transpose(0, 3, 1, 2).reshape(7, 3072),
                   Py2Str(b"filenames"): [Py2Str(f"{name}_{i}.png".encode()) for i in range(7)]}, src / name)
        images[name], labels[name] = imgs, labs
    _dump_py2({Py2Str(b"label_names"): [Py2Str(f"class{i}".encode()) for i in range(10)],
               Py2Str(b"num_cases_per_batch"): 7, Py2Str(b"num_vis"): 3072}, src / "batches.meta")
    archive = tmp_path / "served" / CIFAR10.filename
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname="cifar-10-batches-py")

    # torchvision checks every file against its MD5 list: give it the fake files' MD5s
    monkeypatch.setattr(CIFAR10, "tgz_md5", _md5(archive))
    monkeypatch.setattr(CIFAR10, "train_list", [[n, _md5(src / n)] for n in BATCHES[:5]])
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", _md5(src / "test_batch")]])
    monkeypatch.setattr(CIFAR10, "meta", {"filename": "batches.meta", "key": "label_names",
                                          "md5": _md5(src / "batches.meta")})
    fetched = []

    def fake_urlretrieve(url, filename, chunk_size=None):
        fetched.append(url)
        Path(filename).write_bytes(archive.read_bytes())

    monkeypatch.setattr(tv_utils, "_urlretrieve", fake_urlretrieve)
    return fetched, images, labels


def test_download_fetches_unpacks_and_loads(tmp_path, fake_cifar_archive):
    fetched, images, labels = fake_cifar_archive
    root = tmp_path / "data" / "cifar10"  # does not exist yet
    d = data.load("cifar10", root, download=True)
    assert fetched == [CIFAR10.url]
    assert (root / "cifar-10-batches-py" / "data_batch_5").is_file()
    train_imgs = np.concatenate([images[n] for n in BATCHES[:5]])
    assert torch.equal(d.x_train, torch.from_numpy(train_imgs).permute(0, 3, 1, 2))
    assert d.y_train.tolist() == sum((labels[n] for n in BATCHES[:5]), [])
    assert torch.equal(d.x_test, torch.from_numpy(images["test_batch"]).permute(0, 3, 1, 2))
    assert d.y_test.tolist() == labels["test_batch"]
    assert d.classes == [f"class{i}" for i in range(10)] and d.input_shape == (3, 32, 32)
    tv = CIFAR10(str(root), train=False)  # torchvision reads the same files the same way
    assert np.array_equal(tv.data, images["test_batch"]) and tv.targets == labels["test_batch"]

    # present now: neither load nor locate fetches again, with or without download
    again = data.load("cifar10", root, download=True)
    assert torch.equal(again.x_train, d.x_train) and fetched == [CIFAR10.url]
    assert data.locate("cifar10", root, download=True) == root / "cifar-10-batches-py"
    assert data.locate("cifar10", root) == root / "cifar-10-batches-py"
    assert fetched == [CIFAR10.url]
    (root / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(data.DataError, match="missing CIFAR-10 batch file .*data_batch_3"):
        data.locate("cifar10", root)


def test_locate_downloads_once_for_a_batch_of_workers(tmp_path, fake_cifar_archive):
    fetched, _, _ = fake_cifar_archive
    root = tmp_path / "cifar"
    assert data.locate("cifar10", root, download=True) == root / "cifar-10-batches-py"
    assert fetched == [CIFAR10.url]
    assert len(data.load("cifar10", root).x_test) == 7  # later loads need no flag


def test_failed_download_names_url_and_folder(tmp_path, monkeypatch):
    def offline(url, filename, chunk_size=None):
        raise OSError("Network is unreachable")

    monkeypatch.setattr(tv_utils, "_urlretrieve", offline)
    root = tmp_path / "cifar"
    with pytest.raises(data.DataError) as e:
        data.load("cifar10", root, download=True)
    msg = str(e.value)
    assert CIFAR10.url in msg and str(root) in msg and "Network is unreachable" in msg


def test_missing_cifar_without_download_names_path_and_option(tmp_path):
    missing = tmp_path / "nowhere"
    for call in (lambda: data.load("cifar10", missing), lambda: data.locate("cifar10", missing)):
        with pytest.raises(data.DataError) as e:
            call()
        msg = str(e.value)
        assert str(missing) in msg and "does not exist" in msg and "--download" in msg
        assert "download=True" in msg
    assert not missing.exists()  # nothing created without the flag


def test_imagenet_and_text_cannot_be_downloaded(tmp_path):
    for name in ("imagenet", "text"):
        for call in (data.load, data.locate):
            with pytest.raises(data.DataError, match=f"{name} cannot be downloaded automatically"):
                call(name, tmp_path, download=True)
    with pytest.raises(data.DataError, match="image-net.org"):
        data.load("imagenet", tmp_path, download=True)


def test_locate_checks_imagenet_tree_without_decoding(tmp_path):
    root = tmp_path / "imagenet"
    with pytest.raises(data.DataError, match=f"data directory {root} does not exist.*ImageFolder"):
        data.locate("imagenet", root)
    (root / "train" / "n01").mkdir(parents=True)
    (root / "train" / "n01" / "a.JPEG").write_bytes(b"not decoded by locate")
    with pytest.raises(data.DataError, match=f"no val/ or test/ folder in {root}"):
        data.locate("imagenet", root)
    (root / "val" / "n01").mkdir(parents=True)
    with pytest.raises(data.DataError, match=f"no images .* in the class folders of {root / 'val'}"):
        data.locate("imagenet", root)
    (root / "val" / "n01" / "b.JPEG").write_bytes(b"x")
    assert data.locate("imagenet", root) == root
    if os.geteuid() != 0:  # root reads anything: an unreadable file cannot be staged
        (root / "val" / "n01" / "b.JPEG").chmod(0)
        with pytest.raises(data.DataError, match="cannot read .*b.JPEG"):
            data.locate("imagenet", root)


def test_locate_text_and_builtin_data(tmp_path):
    assert data.locate("digits") is None and data.locate("text") is None
    with pytest.raises(data.DataError, match=f"text path {tmp_path / 'lm1b.txt'} does not exist.*LM1B"):
        data.locate("text", tmp_path / "lm1b.txt")
    (tmp_path / "lm1b.txt").write_text("some text\n")
    assert data.locate("text", tmp_path / "lm1b.txt") == tmp_path / "lm1b.txt"
    with pytest.raises(data.DataError, match=f"no train.txt in {tmp_path}"):
        data.locate("text", tmp_path)
    with pytest.raises(ValueError, match="'mnist'.*digits, cifar10, imagenet, text"):
        data.locate("mnist")
