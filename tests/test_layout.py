"""The layout shows the architecture (docs/architecture.md).

Data flows one way: connectors -> stream -> models -> accounting, with the benchmark suite and
distributed mode above the record flow they use, and the command line on top. Every import of a
dpstream module — at module level or inside a function — is read from the source and checked
against the layers below; the import graph has no cycle.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("accounting", "models", "connectors", "stream")

# Each unit may import units of a lower layer and itself, nothing else.
LAYERS = {
    "accounting": 0,
    "models": 1,
    "connectors": 1,
    "stream.messages": 2, "stream.metrics": 2, "stream.datasets": 3, "stream.runner": 3,
    "stream.bench": 4, "stream.distributed": 4, "stream.members": 4, "stream.run": 4,
    "stream.service": 5, "stream.labels": 2.5, "stream.http": 4, "stream.audit": 5,
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
    # at most 10 modules beside __init__.py (the rule of ../shared/checks/layout.sh)
    top = sorted(p.name for p in (ROOT / "stream").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 10, top
    assert (ROOT / "stream" / "bench" / "suite.py").exists()
    assert (ROOT / "stream" / "distributed" / "__init__.py").exists()


def test_no_two_modules_share_a_file_name():
    names = Counter(p.name for package in PACKAGES for p in (ROOT / package).rglob("*.py")
                    if p.name != "__init__.py")
    assert not [n for n, c in names.items() if c > 1], names.most_common(3)


def _code_lines(source: str) -> tuple[int, ast.Module]:
    """Lines holding code: docstrings, comments and blank lines do not count (the rule of
    ``../shared/checks/layout.sh``)."""
    tree = ast.parse(source)
    doc: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                doc.update(range(first.lineno, first.end_lineno + 1))
    lines: set[int] = set()
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - doc), tree


def _all_modules() -> list[Path]:
    return [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]


def test_no_module_over_600_code_lines():
    big = [f"{p.relative_to(ROOT)}: {n}" for p in _all_modules()
           for n in [_code_lines(p.read_text(encoding="utf-8"))[0]] if n > 600]
    assert not big, big


def test_no_fragment_modules():
    """Every module defines a function or a class (a module holding only a docstring or
    constants belongs where it is used)."""
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    fragments = [str(p.relative_to(ROOT)) for p in _all_modules()
                 if p.name not in ("__init__.py", "__main__.py")
                 and not any(isinstance(n, kinds)
                             for n in ast.walk(_code_lines(p.read_text(encoding="utf-8"))[1]))]
    assert not fragments, fragments


def test_no_flat_folder_over_15_modules():
    folders = Counter(p.parent for p in _all_modules() if p.name != "__init__.py")
    crowded = [f"{d.relative_to(ROOT)}: {n}" for d, n in folders.items() if n > 15]
    assert not crowded, crowded


def test_models_group_their_families_in_sub_packages():
    subs = sorted(p.parent.name for p in (ROOT / "models").glob("*/__init__.py"))
    assert {"boosting", "windows"} <= set(subs), subs


def test_the_model_families_are_independent():
    """The models core imports neither family; boosting and the window forests never import
    each other (each family builds on the core alone)."""
    bad = []
    for name, targets in _graph().items():
        if not name.startswith("models"):
            continue
        family = name.split(".")[1] if name.count(".") >= 1 else None
        family = family if family in ("boosting", "windows") else None
        for t in targets:
            other = t.split(".")[1] if t.startswith("models.") else None
            if other in ("boosting", "windows") and other != family and name != "models":
                bad.append(f"{name} imports {t}")
    assert not bad, bad


def _private_imports(name: str, path: Path) -> list[str]:
    """``from X import _y`` or ``from X._m import y`` where the private name belongs to
    another package than the importing module's (a package's private names are its own)."""
    pkg = name.split(".") if _is_package(path) else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            target = pkg[:len(pkg) - (node.level - 1)] + (node.module.split(".")
                                                          if node.module else [])
        elif node.module and node.module.startswith("dpstream."):
            target = node.module.split(".")[1:]
        else:
            continue
        for alias in node.names:
            full = target + [alias.name]
            private = [i for i, part in enumerate(full)
                       if part.startswith("_") and not part.startswith("__")]
            if not private:
                continue
            owner = full[:private[0]]
            if (ROOT.joinpath(*owner)).with_suffix(".py").exists():
                owner = owner[:-1]   # a private name of a module: its package owns it
            if owner != pkg:
                found.append(f"{name}: from {'.' * node.level}{node.module or ''} "
                             f"import {alias.name}")
    return found


def test_no_private_names_imported_across_packages():
    bad = [hit for name, path in _modules().items() for hit in _private_imports(name, path)]
    assert not bad, bad


def test_the_private_import_check_catches_one(tmp_path):
    fake = tmp_path / "bad.py"
    fake.write_text("from ..windows.random_trees import _mix\nfrom .scores import _x\n"
                    "from ..params import check_real\n")
    hits = _private_imports("models.boosting.bad", fake)
    assert hits == ["models.boosting.bad: from ..windows.random_trees import _mix"], hits


def test_cli_only_parses_and_dispatches():
    """Each command's work lives with its package: the CLI defines no helpers beyond parsing."""
    tree = ast.parse((ROOT / "stream" / "cli.py").read_text(encoding="utf-8"))
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    for f in funcs:
        if f.name.startswith("_cmd_"):
            assert len(f.body) <= 12, f"{f.name} does work the command's package should do"
    # 10 commands, --accept-behind
    assert len((ROOT / "stream" / "cli.py").read_text().splitlines()) < 480


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


def test_all_declares_what_is_meant_to_be_imported():
    """A module that serves one driver is private (``_name.py``) and declares no ``__all__``;
    every other module declares one, naming only what it defines or imports."""
    bad = []
    for path in _all_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        decl = [n for n in tree.body if isinstance(n, ast.Assign)
                and any(getattr(t, "id", "") == "__all__" for t in n.targets)]
        private = path.name.startswith("_") and not path.name.startswith("__")
        where = path.relative_to(ROOT)
        if private and decl:
            bad.append(f"{where}: a private module with __all__")
        elif not private and path.name not in ("__init__.py", "__main__.py") and not decl:
            bad.append(f"{where}: no __all__")
        for node in decl:
            names = ast.literal_eval(node.value)
            defined = {n.name for n in tree.body if isinstance(
                n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
            defined |= {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                        for target in (n.targets if isinstance(n, ast.Assign) else [n.target])
                        for t in ast.walk(target) if isinstance(t, ast.Name)}
            defined |= {(a.asname or a.name).split(".")[0] for n in ast.walk(tree)
                        if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
            bad += [f"{where}: __all__ names {name!r}, which it does not define"
                    for name in names if name not in defined]
    assert not bad, bad
