"""A folder of finished units of work, so that a long probing experiment can be stopped and resumed.

Each unit (one method x seed, one ablation row, ...) is saved as it finishes: ``<name>.json``
(a record: numbers, settings, a table as a list of rows) and, optionally, ``<name>.pt``
(tensors). Both are written to a temporary file in the same folder and renamed into place,
so a unit is either complete or absent; the JSON is written last and marks the unit done.
A rerun skips the units whose JSON exists.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import pandas as pd
import torch

_PART = r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]*"
_NAME = re.compile(f"{_PART}(/{_PART})?")


class UnitStore:
    """Finished units under ``root`` (created if missing). Names are letters, digits and
    ``_ . + -`` (not starting with a dot), optionally in one subfolder (``"nets/greedy"``)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, name: str, suffix: str) -> Path:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"unit name {name!r} must be letters, digits and _ . + -, not starting with a dot (one optional 'dir/' prefix)")
        return self.root / f"{name}{suffix}"

    def _atomic_write(self, path: Path, write) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def done(self, name: str) -> bool:
        """True when unit ``name`` has been saved (its JSON exists)."""
        return self._path(name, ".json").exists()

    def save(self, name: str, record: dict, tensors: dict[str, torch.Tensor] | None = None) -> None:
        """Save unit ``name``: ``tensors`` (if any) first, then ``record`` as JSON (the done mark)."""
        if tensors is not None:
            self.save_tensors(name, tensors)
        text = json.dumps(record, indent=1, default=_jsonable).encode()
        self._atomic_write(self._path(name, ".json"), lambda f: f.write(text))

    def save_tensors(self, name: str, tensors: dict[str, torch.Tensor]) -> None:
        """Write ``<name>.pt`` atomically (on its own it does not mark a unit done)."""
        cpu = {k: v.detach().cpu() for k, v in tensors.items()}
        self._atomic_write(self._path(name, ".pt"), lambda f: torch.save(cpu, f))

    def load(self, name: str) -> dict:
        """The record of unit ``name``."""
        path = self._path(name, ".json")
        if not path.exists():
            raise ValueError(f"unit {name!r} has not been saved in {self.root} (have: {', '.join(self.names()) or 'none'})")
        return json.loads(path.read_text())

    def tensors(self, name: str) -> dict[str, torch.Tensor]:
        """The tensors of unit ``name``."""
        path = self._path(name, ".pt")
        if not path.exists():
            raise ValueError(f"unit {name!r} has no tensors in {self.root}")
        return torch.load(path, map_location="cpu", weights_only=True)

    def names(self) -> list[str]:
        """Every finished unit in the top folder, sorted."""
        return sorted(p.stem for p in self.root.glob("*.json") if not p.name.startswith("."))

    def write_table(self, name: str, df: pd.DataFrame) -> Path:
        """Write a summary table ``<name>.csv`` atomically (not a unit: tables are rebuilt from units)."""
        path = self._path(name, ".csv")
        text = df.to_csv(index=False).encode()
        self._atomic_write(path, lambda f: f.write(text))
        return path


def _jsonable(value):
    if hasattr(value, "item"):      # numpy / torch scalars
        return value.item()
    if isinstance(value, pd.DataFrame):
        return value.to_dict(orient="records")
    raise TypeError(f"cannot save a {type(value).__name__} in a unit record")
