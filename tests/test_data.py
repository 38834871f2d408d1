"""Data layer: every format is written here in miniature, loaded back and compared pixel for pixel."""
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from paper_repro import data, datafiles

CIFAR_JPEG = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "cifar10-jpeg"


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Keep every fallback cache inside the test's tmp folder, never in ~/.cache."""
    d = tmp_path / "user_cache"
    monkeypatch.setenv("PAPER_REPRO_CACHE_DIR", str(d))
    return d


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


# -- digits ---------------------------------------------------------------------------------
def test_digits_shapes_labels_and_pixels(digits):
    from sklearn.datasets import load_digits
    d = digits
    assert (d.name, d.kind, d.num_classes, d.input_shape) == ("digits", "image", 10, (1, 8, 8))
    assert d.x_train.shape == (1437, 1, 8, 8) and d.x_test.shape == (360, 1, 8, 8)
    assert d.x_train.dtype == torch.uint8 and d.y_train.dtype == torch.int64
    share = torch.bincount(torch.cat([d.y_train, d.y_test]), minlength=10) * 360 / 1797
    assert (torch.bincount(d.y_test, minlength=10) - share).abs().max() <= 1  # stratified
    assert int(d.x_train.max()) == 255 and int(d.x_train.min()) == 0
    # train + test together are exactly sklearn's images (0..16 scaled to 0..255) with their labels
    ref = load_digits()
    expected = sorted(np.round(img * 255 / 16).astype(np.uint8).tobytes() + bytes([lab])
                      for img, lab in zip(ref.images, ref.target))
    got = sorted(x.numpy().tobytes() + bytes([int(y)]) for x, y in
                 zip(torch.cat([d.x_train, d.x_test]), torch.cat([d.y_train, d.y_test])))
    assert got == expected


def test_digits_split_is_deterministic(digits):
    again = data.load("digits")
    assert torch.equal(again.x_train, digits.x_train) and torch.equal(again.y_test, digits.y_test)
    other = data.load("digits", seed=1)
    assert not torch.equal(other.y_train, digits.y_train)


def test_normalised_batches_have_zero_mean_unit_std(digits):
    xs = torch.cat([x for x, _ in digits.eval_batches("train", batch_size=500)])
    assert xs.dtype == torch.float32 and xs.shape == (1437, 1, 8, 8)
    assert abs(float(xs.mean())) < 1e-4 and abs(float(xs.std(unbiased=False)) - 1) < 1e-4
    ref = (digits.x_train.double() / 255 - digits.mean[0]) / digits.std[0]
    torch.testing.assert_close(xs.double(), ref, rtol=0, atol=1e-5)


def test_max_train_is_class_balanced_and_image_size_resizes():
    d = data.load("digits", max_train=100, max_test=30, image_size=16)
    assert torch.bincount(d.y_train, minlength=10).tolist() == [10] * 10
    assert len(d.x_test) == 30 and d.input_shape == (1, 16, 16) and d.x_train.shape[1:] == (1, 16, 16)


# -- sampling -------------------------------------------------------------------------------
def _indexed_images(n):
    """A data set whose image i holds its own index in its two pixels (mean 0, std 1)."""
    x = torch.stack([torch.arange(n) // 256, torch.arange(n) % 256], 1).to(torch.uint8).view(n, 1, 1, 2)
    y = torch.arange(n) % 3
    return data.DataSet("digits", "image", x, y, x.clone(), y.clone(), 3, (1, 1, 2), (0.0,), (1.0,))


def _indices(xb):
    v = torch.round(xb * 255).long().view(len(xb), 2)
    return v[:, 0] * 256 + v[:, 1]


def test_sampler_is_deterministic_and_covers_each_epoch():
    ds = _indexed_images(300)

    def draw(seed, k):
        it = ds.sampler("train", 64, torch.Generator().manual_seed(seed))
        return [next(it) for _ in range(k)]

    a, b, c = draw(0, 10), draw(0, 10), draw(1, 10)
    assert all(torch.equal(xa, xb) and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b))
    assert not all(torch.equal(xa, xc) for (xa, _), (xc, _) in zip(a, c))
    idx = torch.cat([_indices(x) for x, _ in a])
    assert all(len(x) == 64 for x, _ in a)
    for epoch in range(2):  # shuffled epochs: each example exactly once per 300 draws
        assert sorted(idx[epoch * 300:(epoch + 1) * 300].tolist()) == list(range(300))
    ys = torch.cat([y for _, y in a])
    assert torch.equal(ys, idx % 3)  # labels travel with their images
    assert idx[:300].tolist() != list(range(300))


def test_eval_batches_cover_split_in_order(digits):
    ys = torch.cat([y for _, y in digits.eval_batches("test", batch_size=100)])
    assert torch.equal(ys, digits.y_test)
    sizes = [len(y) for _, y in digits.eval_batches("test", batch_size=128, max_examples=200)]
    assert sizes == [128, 72]


def test_bad_batch_size_and_split(digits):
    for bad in (0, -3):
        with pytest.raises(ValueError, match="batch_size"):
            digits.sampler("train", bad, torch.Generator())
        with pytest.raises(ValueError, match="batch_size"):
            next(digits.eval_batches("test", batch_size=bad))
    with pytest.raises(ValueError, match="'valid'.*train, test"):
        digits.num_examples("valid")


# -- random labels --------------------------------------------------------------------------
def test_random_labels_fixed_uniform_and_different(digits):
    r = digits.with_random_labels(seed=7)
    assert r.x_train is digits.x_train and r.mean == digits.mean
    assert torch.equal(r.y_train, digits.with_random_labels(seed=7).y_train)  # fixed per example
    assert not torch.equal(r.y_train, digits.with_random_labels(seed=8).y_train)
    agree = float((r.y_train == digits.y_train).float().mean())
    assert agree < 0.2  # chance is 0.1; the true labels agree everywhere
    counts = torch.bincount(r.y_train, minlength=10)
    assert counts.min() > 0.6 * 143.7 and counts.max() < 1.4 * 143.7  # 1437 / 10 each, +-6 sigma
    _, yb = r.batch("train", torch.tensor([5, 5, 9]))
    assert yb.tolist() == [int(r.y_train[5])] * 2 + [int(r.y_train[9])]
    assert not torch.equal(r.y_test, digits.y_test) and len(r.y_test) == len(digits.y_test)


# -- CIFAR-10, official python format -------------------------------------------------------
def _write_cifar_pickles(root: Path, per_file=20, seed=0):
    """A tiny cifar-10-batches-py; returns the HWC images and labels written (train, test)."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    written = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        imgs = rng.integers(0, 256, (per_file, 32, 32, 3), dtype=np.uint8)
        labels = list(rng.permutation(np.arange(per_file) % 10))
        rows = imgs.transpose(0, 3, 1, 2).reshape(per_file, 3072)  # R plane, G plane, B plane
        with open(folder / name, "wb") as f:
            pickle.dump({b"batch_label": name.encode(), b"labels": labels, b"data": rows,
                         b"filenames": [b"x.png"] * per_file}, f)
        written[name] = (imgs, np.array(labels))
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [f"c{i}".encode() for i in range(10)]}, f)
    tr = [written[f"data_batch_{i}"] for i in range(1, 6)]
    return (np.concatenate([t[0] for t in tr]), np.concatenate([t[1] for t in tr])), written["test_batch"]


def test_cifar_pickles_load_pixels_in_channel_order(tmp_path):
    (img_tr, lab_tr), (img_te, lab_te) = _write_cifar_pickles(tmp_path)
    for where in (tmp_path, tmp_path / "cifar-10-batches-py"):
        d = data.load("cifar10", where)
        assert d.x_train.shape == (100, 3, 32, 32) and d.x_test.shape == (20, 3, 32, 32)
        assert torch.equal(d.x_train, torch.from_numpy(img_tr).permute(0, 3, 1, 2))
        assert torch.equal(d.x_test, torch.from_numpy(img_te).permute(0, 3, 1, 2))
        assert d.y_train.tolist() == lab_tr.tolist() and d.y_test.tolist() == lab_te.tolist()
        assert d.classes == [f"c{i}" for i in range(10)] and d.num_classes == 10
    # channel 1 of image 0, pixel (0, 1) is green at row 0 col 1: entry 1024 + 1 of the row
    with open(tmp_path / "cifar-10-batches-py" / "data_batch_1", "rb") as f:
        row = pickle.load(f, encoding="bytes")[b"data"][0]
    assert int(d.x_train[0, 1, 0, 1]) == int(row[1025]) and int(d.x_train[0, 2, 1, 0]) == int(row[2048 + 32])
    sub = data.load("cifar10", tmp_path, max_train=30)
    assert torch.bincount(sub.y_train, minlength=10).tolist() == [3] * 10
    rows = {x.numpy().tobytes(): y for x, y in zip(d.x_train, d.y_train.tolist())}
    assert all(rows[x.numpy().tobytes()] == y for x, y in zip(sub.x_train, sub.y_train.tolist()))


def test_cifar_malformed_pickles(tmp_path):
    _write_cifar_pickles(tmp_path)
    bad = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    bad.write_bytes(b"this is not a pickle")
    with pytest.raises(data.DataError, match="data_batch_3.*cs.toronto.edu"):
        data.load("cifar10", tmp_path)
    with open(bad, "wb") as f:
        pickle.dump({b"data": np.zeros((4, 100), np.uint8), b"labels": [0] * 4}, f)
    with pytest.raises(data.DataError, match="data_batch_3.*3072"):
        data.load("cifar10", tmp_path)
    bad.unlink()
    with pytest.raises(data.DataError, match="data_batch_3"):
        data.load("cifar10", tmp_path)


# -- ImageFolder trees ----------------------------------------------------------------------
def _write_tree(root: Path, splits, classes, per_class, size_fn, seed=0):
    """PNG ImageFolder tree; returns {split: [(path, label)]} with labels from sorted class names."""
    rng = np.random.default_rng(seed)
    out = {}
    for split in splits:
        out[split] = []
        for label, c in enumerate(sorted(classes)):
            (root / split / c).mkdir(parents=True)
            for k in range(per_class):
                w, h = size_fn(k)
                arr = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
                path = root / split / c / f"{k:04d}.png"
                Image.fromarray(arr).save(path)
                out[split].append((path, label))
    return out


def _pixel_table(pairs, transform=None):
    table = {}
    for path, label in pairs:
        with Image.open(path) as f:
            im = f.convert("RGB")
        im = transform(im) if transform else im
        table[np.asarray(im).transpose(2, 0, 1).tobytes()] = label
    return table


def test_cifar_imagefolder_pixels_labels_and_cache(tmp_path, monkeypatch):
    classes = ["truck", "airplane", "cat"]  # sorted order gives the labels: airplane 0, cat 1, truck 2
    written = _write_tree(tmp_path, ("train", "test"), classes, 4, lambda k: (32, 32))
    d = data.load("cifar10", tmp_path)
    assert d.classes == ["airplane", "cat", "truck"] and d.num_classes == 3
    assert d.x_train.shape == (12, 3, 32, 32) and d.x_test.shape == (12, 3, 32, 32)
    for split, x, y in (("train", d.x_train, d.y_train), ("test", d.x_test, d.y_test)):
        table = _pixel_table(written[split])
        assert sorted(table) == sorted(img.numpy().tobytes() for img in x)  # PNG is lossless
        assert all(table[img.numpy().tobytes()] == lab for img, lab in zip(x, y.tolist()))
    cache = list((tmp_path / ".paper_repro_cache").glob("*.pt"))
    assert len(cache) == 1
    # the second load reads the cache: decoding would now fail
    monkeypatch.setattr(datafiles, "_decode_image", lambda *a: (_ for _ in ()).throw(AssertionError("decoded")))
    again = data.load("cifar10", tmp_path)
    for a, b in ((d.x_train, again.x_train), (d.y_train, again.y_train), (d.x_test, again.x_test)):
        assert torch.equal(a, b)
    assert d.mean == again.mean and d.std == again.std


def test_read_only_data_dir_caches_elsewhere(tmp_path, cache_dir):
    root = tmp_path / "tree"
    _write_tree(root, ("train", "test"), ["a", "b"], 2, lambda k: (32, 32))
    os.chmod(root, 0o555)
    try:
        first = data.load("cifar10", root, max_train=2)
        assert not (root / ".paper_repro_cache").exists()
        assert len(list(cache_dir.glob("*.pt"))) == 1
        assert torch.equal(data.load("cifar10", root, max_train=2).x_train, first.x_train)
        assert torch.bincount(first.y_train).tolist() == [1, 1]
    finally:
        os.chmod(root, 0o755)


def test_imagenet_resize_and_center_crop_match_torchvision(tmp_path):
    from torchvision import transforms
    sizes = [(40, 30), (30, 50), (16, 16), (64, 64)]
    written = _write_tree(tmp_path, ("train", "val"), ["n01", "n02"], 4, lambda k: sizes[k])
    d = data.load("imagenet", tmp_path, image_size=16)
    assert d.x_train.shape == (8, 3, 16, 16) and d.input_shape == (3, 16, 16)
    ref = transforms.Compose([transforms.Resize(round(16 * 256 / 224)), transforms.CenterCrop(16)])
    for split, x, y in (("train", d.x_train, d.y_train), ("val", d.x_test, d.y_test)):
        unchanged = {p: lab for p, lab in written[split] if p.name == "0002.png"}  # already 16 x 16
        table = _pixel_table([(p, lab) for p, lab in written[split] if p not in unchanged], ref)
        table.update(_pixel_table(unchanged.items()))
        assert sorted(table) == sorted(img.numpy().tobytes() for img in x)
        assert all(table[img.numpy().tobytes()] == lab for img, lab in zip(x, y.tolist()))


def test_imagefolder_errors_name_the_path(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(data.DataError, match=f"{missing}.*does not exist.*--download"):
        data.load("cifar10", missing)
    with pytest.raises(data.DataError, match="imagenet needs a data directory"):
        data.load("imagenet")
    with pytest.raises(data.DataError, match="cifar10 needs a data directory"):
        data.load("cifar10")
    empty = tmp_path / "empty"
    empty.mkdir()
    for name in ("cifar10", "imagenet"):
        with pytest.raises(data.DataError, match=f"{empty} is empty"):
            data.load(name, empty)
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "readme.txt").write_text("hello")
    with pytest.raises(data.DataError, match=f"{odd}.*ImageFolder"):
        data.load("cifar10", odd)
    only_train = tmp_path / "only_train"
    _write_tree(only_train, ("train",), ["a"], 1, lambda k: (8, 8))
    with pytest.raises(data.DataError, match=f"no val/ or test/ folder in {only_train}"):
        data.load("imagenet", only_train)
    corrupt = tmp_path / "corrupt"
    _write_tree(corrupt, ("train", "test"), ["a", "b"], 2, lambda k: (32, 32))
    (corrupt / "train" / "b" / "0001.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(data.DataError, match=f"{corrupt / 'train' / 'b' / '0001.png'}"):
        data.load("cifar10", corrupt)
    no_images = tmp_path / "no_images"
    (no_images / "train" / "a").mkdir(parents=True)
    (no_images / "test" / "a").mkdir(parents=True)
    with pytest.raises(data.DataError, match=f"no images.*{no_images / 'train'}"):
        data.load("cifar10", no_images)


def test_unknown_name_and_bad_arguments():
    with pytest.raises(ValueError, match="'mnist'.*digits, cifar10, imagenet, text"):
        data.load("mnist")
    with pytest.raises(ValueError, match="max_train.*0"):
        data.load("digits", max_train=0)
    with pytest.raises(ValueError, match="'word'.*byte, char"):
        data.load("text", level="word")
    assert issubclass(data.DataError, ValueError)
    assert data.DATASETS == data.IMAGE_DATASETS + data.TEXT_DATASETS


@pytest.mark.skipif(not CIFAR_JPEG.is_dir(), reason="no CIFAR-10 JPEG tree on this machine")
def test_real_cifar10_subset(cache_dir):
    d = data.load("cifar10", CIFAR_JPEG, max_train=100, max_test=50)
    assert d.x_train.shape == (100, 3, 32, 32) and d.x_test.shape == (50, 3, 32, 32)
    assert torch.bincount(d.y_train, minlength=10).tolist() == [10] * 10
    assert d.classes[:3] == ["airplane", "automobile", "bird"]
    assert all(0.3 < m < 0.7 for m in d.mean) and all(0.15 < s < 0.35 for s in d.std)
    if not CIFAR_JPEG.stat().st_mode & 0o222:  # a tree marked read-only is cached elsewhere
        assert len(list(cache_dir.glob("*.pt"))) == 1


# -- text -----------------------------------------------------------------------------------
TEXT = "Grüße aus Zürich! The quick brown fox jumps over the lazy dog. " * 40


def test_text_byte_level_from_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    d = data.load("text", path, seq_len=16)
    raw = TEXT.encode("utf-8")
    cut = int(len(raw) * 0.9)
    assert (d.kind, d.num_classes, d.input_shape, d.seq_len, d.y_train) == ("text", 256, (16,), 16, None)
    assert d.x_train.dtype == torch.int64 and d.x_train.tolist() == list(raw[:cut])
    assert d.x_test.tolist() == list(raw[cut:])
    assert d.decode(d.x_train[:4]) == "Grü" and d.decode(d.x_train) == raw[:cut].decode("utf-8", "replace")


def test_text_char_level_and_train_test_files(tmp_path):
    (tmp_path / "train.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "test.txt").write_text("Zürich fox? " * 10, encoding="utf-8")
    d = data.load("text", tmp_path, seq_len=8, level="char")
    assert d.vocab == sorted(set(TEXT) | set("Zürich fox?")) and d.num_classes == len(d.vocab)
    assert d.decode(d.x_train) == TEXT and d.decode(d.x_test) == "Zürich fox? " * 10


def test_text_windows_are_shifted_by_one(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text(TEXT)
    d = data.load("text", path, seq_len=16)
    toks, n = d.x_train, d.num_examples("train")
    assert n == len(toks) - 16
    starts = torch.tensor([0, 5, n - 1])
    x, y = d.batch("train", starts)
    assert x.shape == y.shape == (3, 16) and x.dtype == y.dtype == torch.int64
    for row, s in enumerate(starts.tolist()):
        assert torch.equal(x[row], toks[s:s + 16]) and torch.equal(y[row], toks[s + 1:s + 17])
    assert int(y[-1, -1]) == int(toks[-1])
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    s1, s2 = d.sampler("train", 4, g1), d.sampler("train", 4, g2)
    for _ in range(5):
        (xa, ya), (xb, yb) = next(s1), next(s2)
        assert torch.equal(xa, xb) and torch.equal(ya, yb) and torch.equal(xa[:, 1:], ya[:, :-1])
    windows = [x for x, _ in d.eval_batches("test", batch_size=3)]
    flat = torch.cat(windows).flatten()
    assert torch.equal(flat, d.x_test[:len(flat)])  # non-overlapping, in order
    assert len(flat) // 16 == (len(d.x_test) - 17) // 16 + 1  # every window that fits


def test_text_default_is_pydoc_topics():
    from pydoc_data.topics import topics
    d = data.load("text", seq_len=32)
    assert d.source.startswith("pydoc_data.topics") and d.num_classes == 256
    total = len(d.x_train) + len(d.x_test)
    assert total == len("\n".join(topics[k] for k in sorted(topics)).encode("utf-8")) > 400_000
    x, _ = d.batch("train", torch.tensor([1000]))
    assert d.decode(x[0]) in "\n".join(topics.values())
    c = data.load("text", seq_len=32, level="char")
    assert c.num_classes == len(c.vocab) < 256


def test_text_errors(tmp_path):
    with pytest.raises(data.DataError, match=f"{tmp_path / 'no.txt'} does not exist"):
        data.load("text", tmp_path / "no.txt")
    with pytest.raises(data.DataError, match=f"no train.txt in {tmp_path}"):
        data.load("text", tmp_path)
    short = tmp_path / "short.txt"
    short.write_text("tiny")
    with pytest.raises(data.DataError, match="short.txt.*seq_len"):
        data.load("text", short, seq_len=64)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("café ".encode("latin-1") * 100)
    with pytest.raises(data.DataError, match="latin.txt is not UTF-8"):
        data.load("text", latin, level="char")
    assert data.load("text", latin, seq_len=8).num_classes == 256
    with pytest.raises(ValueError, match="random labels need an image"):
        data.load("text", latin, seq_len=8).with_random_labels(0)
