"""The layout shows the architecture (DESIGN.md §2, docs/architecture.md).

Data flows one way: connectors -> stream -> models -> accounting, with the benchmark suite and
distributed mode above the record flow they use, and the command line on top. Every import of a
dpstream module — at module level or inside a function — is read from the source and checked
against the layers below; the import graph has no cycle.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("accounting", "models", "connectors", "stream")

# Each unit may import units of a lower layer and itself, nothing else.
LAYERS = {
    "accounting": 0,
    "models": 1,
    "connectors": 1,
    "stream.messages": 2, "stream.metrics": 2, "stream.datasets": 3, "stream.runner": 3,
    "stream.bench": 4, "stream.distributed": 4, "stream.members": 4, "stream.warmup": 4,
    "stream.service": 5, "stream.run": 5,
    "stream.cli": 6,
    "stream": 6,          # the package's __init__ re-exports the record flow's public names
}


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _imports(name: str, path: Path) -> set[str]:
    """The dpstream modules ``name`` imports (relative imports resolved, ``dpstream.`` cut)."""
    base = name.split(".") if _is_package(path) else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[:len(base) - (node.level - 1)]
                target = ".".join(anchor + ([node.module] if node.module else []))
                names = [target] + [f"{target}.{a.name}" for a in node.names]
            elif node.module and node.module.startswith("dpstream."):
                target = node.module.removeprefix("dpstream.")
                names = [target] + [f"{target}.{a.name}" for a in node.names]
            else:
                continue
            found.update(n for n in names if n)
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("dpstream.") for a in node.names
                         if a.name.startswith("dpstream."))
    return found


def _unit(module: str) -> str:
    """The layered unit a module belongs to (its longest prefix in LAYERS)."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in LAYERS:
            return ".".join(parts[:i])
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS in this test")


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: {t for t in _imports(name, path) if t in mods} for name, path in mods.items()}


def test_every_import_goes_down_a_layer():
    bad = []
    for name, targets in _graph().items():
        src = _unit(name)
        for t in targets:
            dst = _unit(t)
            if dst != src and LAYERS[dst] >= LAYERS[src]:
                bad.append(f"{name} imports {t} ({src} may not import {dst})")
    assert not bad, "\n".join(bad)


def test_the_import_graph_has_no_cycle():
    graph = _graph()
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if nxt == node or nxt.startswith(node + ".") or node.startswith(nxt + "."):
                continue   # a package and its own modules
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path + [nxt]))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_the_layer_check_catches_an_upward_import(tmp_path):
    """The checker itself: a models module importing the stream layer is reported."""
    fake = tmp_path / "models" / "bad.py"
    fake.parent.mkdir()
    fake.write_text("from ..stream.runner import Runner\nfrom ..accounting import laplace\n")
    found = _imports("models.bad", fake)
    assert "stream.runner" in found and "accounting" in found
    assert LAYERS[_unit("stream.runner")] > LAYERS[_unit("models.bad")]


def test_stream_keeps_the_record_flow_only():
    top = sorted(p.name for p in (ROOT / "stream").glob("*.py"))
    assert len(top) <= 10, top
    assert (ROOT / "stream" / "bench" / "suite.py").exists()
    assert (ROOT / "stream" / "distributed" / "__init__.py").exists()


def test_no_two_modules_share_a_file_name():
    names = Counter(p.name for package in PACKAGES for p in (ROOT / package).rglob("*.py")
                    if p.name != "__init__.py")
    assert not [n for n, c in names.items() if c > 1], names.most_common(3)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_over_600_lines(package):
    for path in (ROOT / package).rglob("*.py"):
        n = len(path.read_text(encoding="utf-8").splitlines())
        assert n <= 600, f"{path.relative_to(ROOT)} has {n} lines"


def test_cli_only_parses_and_dispatches():
    """Each command's work lives with its package: the CLI defines no helpers beyond parsing."""
    tree = ast.parse((ROOT / "stream" / "cli.py").read_text(encoding="utf-8"))
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    for f in funcs:
        if f.name.startswith("_cmd_"):
            assert len(f.body) <= 12, f"{f.name} does work the command's package should do"
    assert len((ROOT / "stream" / "cli.py").read_text().splitlines()) < 400


def test_users_read_paper_names_not_internal_numbers():
    import re

    pattern = re.compile(r"seeds? ?-?00[0-4]", re.IGNORECASE)
    places = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"),
              *(ROOT / "examples").rglob("*.py")]
    places += [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in places
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if pattern.search(line)]
    assert not hits, hits[:10]


def test_every_module_defers_annotations():
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            assert "from __future__ import annotations" in path.read_text(), path


def test_the_device_scripts_are_valid_shell():
    """``benchmarks/device_wheels.sh`` and ``benchmarks/device_scale_out.sh`` run only before
    and on a lent device machine; here they must at least parse."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    for name in ("device_wheels.sh", "device_scale_out.sh"):
        script = root / "benchmarks" / name
        out = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert out.returncode == 0, (name, out.stderr)
