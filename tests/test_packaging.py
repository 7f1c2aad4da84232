"""The distribution: a built wheel holds every package of the source tree (the explicit package
list in pyproject.toml is kept in step with the folders), the bundled data, and the license."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("accounting", "models", "connectors", "stream")


def _source_packages() -> set[str]:
    found = {"dpstream"}
    for package in PACKAGES:
        for init in (ROOT / package).rglob("__init__.py"):
            found.add(".".join(["dpstream", *init.parent.relative_to(ROOT).parts]))
    return found


def test_pyproject_lists_every_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    assert _source_packages() <= listed, sorted(_source_packages() - listed)
    assert config["project"]["license"] == "Apache-2.0"   # an SPDX expression


def _copy_source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "__init__.py"):
        shutil.copy(ROOT / name, src / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, src / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    return src


def test_a_built_wheel_holds_every_package_and_the_data(tmp_path):
    src = _copy_source(tmp_path)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps",
                          "--no-build-isolation", "-q", "-w", str(tmp_path / "dist")],
                         capture_output=True, text=True, cwd=src)
    assert out.returncode == 0, out.stderr
    assert "warning" not in out.stderr.lower(), out.stderr   # license table, data package ...
    wheel = next((tmp_path / "dist").glob("dpstream-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in _source_packages():
        init = package.replace(".", "/") + "/__init__.py"
        assert init in names, f"{package} is missing from the wheel"
    for data in ("adult.data.gz", "adult.test.gz", "abalone.csv.gz", "elec2.csv.gz",
                 "ATTRIBUTION.md"):
        assert f"dpstream/stream/data/{data}" in names
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    assert "License-Expression: Apache-2.0" in text
    assert any(n.endswith("licenses/LICENSE") for n in names)



def test_the_editable_install_of_make_prints_no_setuptools_warning(tmp_path):
    """``make run`` / ``make test`` install in editable mode with the Makefile's EDITABLE
    environment: the PEP 660 build they run prints no setuptools warning (without that
    environment it prints the "Editable installation" notice: the negative control)."""
    import os
    import re

    line = re.search(r'^EDITABLE := PYTHONWARNINGS="([^"]+)"', (ROOT / "Makefile").read_text(),
                     re.M)
    assert line, "the Makefile sets no EDITABLE environment"
    src = _copy_source(tmp_path)

    def build(env: dict) -> str:
        dist = tmp_path / f"dist-{len(env)}"
        dist.mkdir()
        code = ("import logging; logging.basicConfig(); from setuptools import build_meta; "
                f"build_meta.build_editable({str(dist)!r})")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             cwd=src, env=env)
        assert out.returncode == 0, out.stderr
        assert list(dist.glob("dpstream-*.editable-*.whl"))
        shutil.rmtree(src / "build", ignore_errors=True)
        return out.stderr

    plain = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    assert "Editable installation" in build(plain)
    quiet = build({**plain, "PYTHONWARNINGS": line.group(1)})
    assert "Editable installation" not in quiet and "Warning:" not in quiet, quiet
