"""The module map of docs/development.md names every module of the package."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_is_in_the_layout_map():
    text = (ROOT / "docs" / "development.md").read_text()
    block = re.search(r"## Layout\n.*?```\n(paper_repro/\n.*?)```", text, re.S).group(1)
    missing = []
    for path in sorted((ROOT / "paper_repro").rglob("*.py")):
        rel = path.relative_to(ROOT / "paper_repro")
        if rel.name == "__init__.py":
            continue
        if len(rel.parts) == 1:
            found = re.search(rf"(^|\W){re.escape(rel.name)}\b", block, re.M)
        else:  # a subpackage's modules are named after its folder's line, by file or module name
            section = re.search(rf"^  {re.escape(rel.parts[0])}/(.*?)(?=^  \S|\Z)", block, re.S | re.M)
            found = section and re.search(rf"\b{re.escape(rel.stem)}(\.py)?\b", section.group(1))
        if not found:
            missing.append(str(rel))
    assert not missing, f"docs/development.md's layout does not name {missing}"
