"""Every docstring example in the installed package, and the code in docs/*.md, runs."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import dpstream
from dpstream.models import private_state_access

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
MODULES = ["dpstream", *sorted(
    m.name for sub in ("accounting", "models", "stream", "connectors")
    for m in pkgutil.walk_packages(importlib.import_module(f"dpstream.{sub}").__path__,
                                   prefix=f"dpstream.{sub}.")
)]
DOCS = sorted((Path(__file__).resolve().parent.parent / "docs").glob("*.md"))


def test_modules_were_found():
    assert "dpstream.accounting.rdp" in MODULES and len(MODULES) >= 12


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests(name):
    module = importlib.import_module(name)
    with private_state_access(False):   # (a user's session: no curator pickles)
        result = doctest.testmod(module, optionflags=FLAGS, raise_on_error=False,
                                 verbose=False)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_docs_examples(path):
    with private_state_access(False):
        result = doctest.testfile(str(path), module_relative=False, optionflags=FLAGS,
                                  globs={"dpstream": dpstream})
    assert result.failed == 0, f"{result.failed} example(s) failed in {path.name}"
