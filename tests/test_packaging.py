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


def test_a_built_wheel_holds_every_package_and_the_data(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "__init__.py"):
        shutil.copy(ROOT / name, src / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, src / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps",
                          "--no-build-isolation", "-q", "-w", str(tmp_path / "dist")],
                         capture_output=True, text=True, cwd=src)
    assert out.returncode == 0, out.stderr
    assert "absent from the packages configuration" not in out.stderr, out.stderr
    wheel = next((tmp_path / "dist").glob("dpstream-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in _source_packages():
        init = package.replace(".", "/") + "/__init__.py"
        assert init in names, f"{package} is missing from the wheel"
    for data in ("adult.data.gz", "adult.test.gz", "abalone.csv.gz", "ATTRIBUTION.md"):
        assert f"dpstream/stream/data/{data}" in names
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    assert "License-Expression: Apache-2.0" in text
    assert any(n.endswith("licenses/LICENSE") for n in names)
