"""The built-in text corpora: text that every machine has without a download.

    pydoc    Python's pydoc topics (``pydoc_data.topics``, about 0.5 MB): the topics joined by
             newlines in sorted order, the first 90% for training and the rest held out
    stdlib   the source of the running Python's standard library (about 12 MB on Python 3.11.7):
             every ``*.py`` file under ``sysconfig.get_paths()["stdlib"]`` except the test suites
             (any folder named ``test``, ``tests`` or ``idle_test``), installed packages
             (``site-packages``, ``dist-packages``) and the two build-specific files that name the
             install prefix (``_sysconfigdata_*.py``, ``config-*/``); files in sorted order of
             their relative path (``/``-separated), each file's bytes as they are, one after the
             other. Held out by file: every 10th file of that order (the 10th, 20th, ...) is
             test text, the others training text, so no window of the test split was seen in
             training.

A corpus is named by its SHA-256 (:func:`corpus_sha256`): over every file in order, its relative
path, a NUL byte, its contents and a NUL byte (pydoc: its one text). The same hash means the same
files and so the same split. The standard library differs between Python releases and some Linux
distributions patch or split it, so :data:`STDLIB_SHA256` records the hash on the pinned Python
and ``data.load("text", corpus="stdlib", corpus_sha256=...)`` warns (:class:`CorpusMismatch`)
naming both hashes when the text on this machine is another.
"""
from __future__ import annotations

import hashlib
import platform
import sysconfig
import warnings
from dataclasses import dataclass
from pathlib import Path

CORPORA = ("pydoc", "stdlib")
# the stdlib corpus of the Python the lock is resolved for (Makefile: CPython 3.11.7): 732 files,
# 12,079,736 bytes (10,776,914 training, 1,302,822 held out in 73 files)
STDLIB_PYTHON = "3.11.7"
STDLIB_SHA256 = "c5e5d98aa956577bb51f7f03b779fd78bc9521305c526313f2c69445bea3b349"
TEST_EVERY = 10                    # every 10th file (stdlib) is held out
PYDOC_TRAIN_FRACTION = 0.9
_SKIP_DIRS = ("test", "tests", "idle_test", "__pycache__")
_SKIP_TOP = ("site-packages", "dist-packages")


class CorpusMismatch(UserWarning):
    """The corpus on this machine is not the one a grid (its ``corpus_sha256``) was made with."""


@dataclass(frozen=True)
class Corpus:
    name: str            # one of CORPORA
    train: bytes         # training text (UTF-8 bytes)
    test: bytes          # held-out text
    sha256: str          # the corpus's hash (module docstring)
    files: tuple         # relative paths, in order (pydoc: ("pydoc_data.topics",))
    test_files: tuple    # the held-out ones
    python: str          # the Python release it was read from
    root: str            # where (the standard library folder; pydoc: the module's file)

    @property
    def source(self) -> str:
        """One line for a data set's ``source``: what, from which Python, and its hash."""
        what = "pydoc_data.topics" if self.name == "pydoc" else "standard library source"
        return (f"{what} of Python {self.python} ({len(self.train) + len(self.test):,} bytes, "
                f"{len(self.files)} file(s), sha256 {self.sha256[:12]})")


def stdlib_root() -> Path:
    """The running Python's standard library folder (the same inside a virtual environment)."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: str | Path | None = None) -> list[str]:
    """The corpus's files under ``root`` (default: :func:`stdlib_root`), as sorted relative paths."""
    root = Path(root) if root is not None else stdlib_root()
    out = []
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).parts
        if (parts[0] in _SKIP_TOP or parts[0].startswith("config-") or parts[-1].startswith("_sysconfigdata")
                or any(p in _SKIP_DIRS for p in parts[:-1]) or not path.is_file()):
            continue
        out.append("/".join(parts))
    return sorted(out)


def corpus_sha256(named_texts) -> str:
    """SHA-256 over ``(name, bytes)`` pairs in order: each name, NUL, its bytes, NUL."""
    h = hashlib.sha256()
    for name, text in named_texts:
        h.update(name.encode("utf-8") + b"\0")
        h.update(text)
        h.update(b"\0")
    return h.hexdigest()


def load_stdlib(root: str | Path | None = None) -> Corpus:
    """The ``stdlib`` corpus of the Python at ``root`` (default: the running one)."""
    root = Path(root) if root is not None else stdlib_root()
    files = stdlib_files(root)
    if not files:
        raise FileNotFoundError(f"no Python source files in {root}: the standard library's source is not "
                                "installed here (some distributions ship only .pyc files)")
    texts = [(f, (root / f).read_bytes()) for f in files]
    test = [i % TEST_EVERY == TEST_EVERY - 1 for i in range(len(texts))]
    return Corpus(name="stdlib", train=b"".join(t for (_, t), held in zip(texts, test) if not held),
                  test=b"".join(t for (_, t), held in zip(texts, test) if held), sha256=corpus_sha256(texts),
                  files=tuple(files), test_files=tuple(f for f, held in zip(files, test) if held),
                  python=platform.python_version(), root=str(root))


def load_pydoc() -> Corpus:
    """The ``pydoc`` corpus: pydoc's topics in sorted order, the last 10% held out."""
    from pydoc_data import topics as module

    text = "\n".join(module.topics[k] for k in sorted(module.topics)).encode("utf-8")
    cut = int(len(text) * PYDOC_TRAIN_FRACTION)
    return Corpus(name="pydoc", train=text[:cut], test=text[cut:], sha256=corpus_sha256([("pydoc_data.topics", text)]),
                  files=("pydoc_data.topics",), test_files=(), python=platform.python_version(),
                  root=str(module.__file__))


def load(name: str, expected_sha256: str | None = None) -> Corpus:
    """Built-in corpus ``name`` (one of :data:`CORPORA`). With ``expected_sha256``, a corpus whose
    hash differs gives a :class:`CorpusMismatch` warning naming both hashes."""
    if name not in CORPORA:
        raise ValueError(f"unknown text corpus {name!r}; valid: {', '.join(CORPORA)}")
    if expected_sha256 is not None and not (isinstance(expected_sha256, str) and len(expected_sha256) == 64
                                            and all(c in "0123456789abcdef" for c in expected_sha256)):
        raise ValueError(f"corpus_sha256 must be 64 lowercase hex digits, got {expected_sha256!r}")
    corpus = load_stdlib() if name == "stdlib" else load_pydoc()
    if expected_sha256 is not None and corpus.sha256 != expected_sha256:
        pinned = f" (the {name} corpus of Python {STDLIB_PYTHON} has {STDLIB_SHA256})" if name == "stdlib" else ""
        warnings.warn(f"the {name} corpus here (Python {corpus.python}, {corpus.root}) has SHA-256 {corpus.sha256}, "
                      f"not the {expected_sha256} this run expects{pinned}: its results are not comparable with "
                      "runs on the expected text", CorpusMismatch, stacklevel=3)
    return corpus
