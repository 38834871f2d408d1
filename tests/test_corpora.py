"""The built-in text corpora: the standard library's source as a fixed, hashed corpus with a
held-out split by file, and the errors and warnings around it."""
import platform
import warnings

import pytest
import torch

from paper_repro import corpora, data


def _fake_stdlib(root):
    """A standard-library-like tree: sources, test suites, installed packages, build files."""
    files = {f"mod{i:02d}.py": f"x = {i}\n" for i in range(25)}
    files.update({"pkg/__init__.py": "", "pkg/sub/a.py": "a = 1\n", "pkg/tests/test_a.py": "skip\n",
                  "test/test_os.py": "skip\n", "idlelib/idle_test/t.py": "skip\n", "idlelib/run.py": "r = 1\n",
                  "site-packages/numpy/core.py": "skip\n", "dist-packages/x.py": "skip\n",
                  "_sysconfigdata__linux.py": "PREFIX = '/somewhere'\n", "config-3.11-x86_64/python-config.py": "skip\n",
                  "notes.txt": "not python\n"})
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return files


def test_stdlib_files_skip_tests_packages_and_build_files(tmp_path):
    _fake_stdlib(tmp_path)
    files = corpora.stdlib_files(tmp_path)
    assert files == sorted(files) and len(files) == 28
    assert {"pkg/__init__.py", "pkg/sub/a.py", "idlelib/run.py"} <= set(files)
    assert not [f for f in files if "test" in f or "packages" in f or "sysconfig" in f or "config-" in f]


def test_stdlib_split_is_by_file_disjoint_and_deterministic(tmp_path):
    files = _fake_stdlib(tmp_path)
    c = corpora.load_stdlib(tmp_path)
    assert c.test_files == tuple(c.files[9::10])                     # every 10th file, in sorted order
    train_files = [f for f in c.files if f not in c.test_files]
    assert c.train == b"".join(files[f].encode() for f in train_files)
    assert c.test == b"".join(files[f].encode() for f in c.test_files)
    again = corpora.load_stdlib(tmp_path)
    assert (again.train, again.test, again.sha256) == (c.train, c.test, c.sha256)
    # the hash covers names and contents: renaming or editing one file changes it
    (tmp_path / "mod00.py").write_text("x = -1\n")
    assert corpora.load_stdlib(tmp_path).sha256 != c.sha256


@pytest.fixture(scope="module")
def stdlib():
    return corpora.load_stdlib()


def test_the_real_stdlib_corpus(stdlib):
    assert len(stdlib.train) + len(stdlib.test) > 10_000_000          # about 12 MB on Python 3.11
    assert 0.05 < len(stdlib.test) / (len(stdlib.train) + len(stdlib.test)) < 0.2
    assert not set(stdlib.test_files) - set(stdlib.files) and len(stdlib.test_files) == len(stdlib.files) // 10
    assert "os.py" in stdlib.files and not any(f.startswith(("test/", "site-packages/")) for f in stdlib.files)
    if platform.python_version() == corpora.STDLIB_PYTHON:              # the pinned Python: the recorded hash
        assert stdlib.sha256 == corpora.STDLIB_SHA256


def test_load_text_from_the_stdlib_corpus(stdlib):
    with warnings.catch_warnings():
        warnings.simplefilter("error", corpora.CorpusMismatch)
        d = data.load("text", corpus="stdlib", corpus_sha256=stdlib.sha256, seq_len=64)
    assert len(d.x_train) == len(stdlib.train) and len(d.x_test) == len(stdlib.test)
    assert bytes(d.x_test[:200].tolist()) == stdlib.test[:200] and d.num_classes == 256
    assert "standard library" in d.source and stdlib.sha256[:12] in d.source and stdlib.python in d.source
    x, y = d.batch("test", torch.tensor([0]))
    assert torch.equal(x[0, 1:], y[0, :-1])


def test_a_different_corpus_warns_naming_both_hashes(stdlib):
    other = "0" * 64
    with pytest.warns(corpora.CorpusMismatch, match=f"{stdlib.sha256}.*{other}"):
        data.load("text", corpus="stdlib", corpus_sha256=other, seq_len=64, max_train=1000, max_test=1000)


def test_pydoc_is_still_the_default():
    default, named = data.load("text", seq_len=32), data.load("text", corpus="pydoc", seq_len=32)
    assert torch.equal(default.x_train, named.x_train) and torch.equal(default.x_test, named.x_test)
    assert default.source == named.source == "pydoc_data.topics (byte-level)"


def test_bad_corpus_arguments_are_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match="unknown text corpus 'wiki'; valid: pydoc, stdlib"):
        data.load("text", corpus="wiki")
    with pytest.raises(ValueError, match="either data_dir .* or corpus"):
        data.load("text", tmp_path, corpus="stdlib")
    with pytest.raises(ValueError, match="for the text data set, not 'digits'"):
        data.load("digits", corpus="stdlib")
    with pytest.raises(ValueError, match="64 lowercase hex digits"):
        data.load("text", corpus="stdlib", corpus_sha256="abc")
    with pytest.raises(FileNotFoundError, match="no Python source files"):
        corpora.load_stdlib(tmp_path)
