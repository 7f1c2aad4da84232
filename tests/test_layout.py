"""Data flows one way: connectors -> stream -> models -> accounting (DESIGN.md §2)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "accounting": {"models", "stream", "connectors"},
    "models": {"stream", "connectors"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level >= 2 and node.module:  # from ..models import x
                found.add(node.module.split(".")[0])
            elif node.level == 0 and node.module and node.module.startswith("dpstream."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("dpstream."):
                    found.add(alias.name.split(".")[1])
    return found


@pytest.mark.parametrize("package", ["accounting", "models"])
def test_no_upstream_imports(package):
    for path in (ROOT / package).rglob("*.py"):
        bad = _imports(path) & FORBIDDEN[package]
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_every_module_defers_annotations():
    for package in ("accounting", "models", "stream", "connectors"):
        for path in (ROOT / package).rglob("*.py"):
            assert "from __future__ import annotations" in path.read_text(), path
