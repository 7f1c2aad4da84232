"""Every script in benchmarks/ and examples/ answers ``--help`` at once, without running.

A *script* is a ``*.py`` file in either folder whose name does not start with ``_``; a leading
underscore marks a helper module that scripts import (``benchmarks/_timing.py``). Every script
must have an ``if __name__ == "__main__":`` block, so that importing it does no work and its
arguments are parsed (argparse) before any. ``--help`` runs in a subprocess per script, all at
once on a thread pool (the time goes to importing numpy, numba and river, not to waiting).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p for folder in ("benchmarks", "examples")
                 for p in (ROOT / folder).glob("*.py") if not p.name.startswith("_"))
#: seconds one ``--help`` may take: imports only (a benchmark ran for minutes before)
LIMIT_S = 30
MAIN_BLOCK = re.compile(r'^if __name__ == "__main__":', re.M)


def _ids(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def ask_help(script: Path, limit_s: float = LIMIT_S) -> subprocess.CompletedProcess | str:
    """``python SCRIPT --help``: the completed process, or why it did not complete."""
    try:
        return subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                              text=True, timeout=limit_s, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return f"no answer in {limit_s} s: it ignores --help and runs"


@pytest.fixture(scope="module")
def answers() -> dict[Path, subprocess.CompletedProcess | str]:
    """Every script's ``--help``, asked on a thread pool."""
    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        return dict(zip(SCRIPTS, pool.map(ask_help, SCRIPTS), strict=True))


def test_the_scripts_are_found():
    names = {_ids(p) for p in SCRIPTS}
    assert {"benchmarks/service_bench.py", "examples/sgbdt_stream.py"} <= names
    assert "benchmarks/_timing.py" not in names   # a helper module, not a script
    assert len(names) >= 40


@pytest.mark.parametrize("script", SCRIPTS, ids=_ids)
def test_a_script_has_a_main_block(script):
    """Importing a script (doctests, tests that load one of its functions) runs nothing."""
    assert MAIN_BLOCK.search(script.read_text()), f"{_ids(script)} has no __main__ block"


@pytest.mark.parametrize("script", SCRIPTS, ids=_ids)
def test_a_script_answers_help(script, answers):
    out = answers[script]
    assert not isinstance(out, str), f"{_ids(script)}: {out}"
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("usage:"), out.stdout[:500]
    assert "-h, --help" in out.stdout


def test_the_check_fails_on_a_script_that_ignores_help(tmp_path):
    """The check itself: a script that works before it reads its arguments is reported, and
    one that reads them by hand prints no usage."""
    works_first = tmp_path / "works_first.py"
    works_first.write_text("import time\ntime.sleep(60)\n")
    t0 = time.monotonic()
    assert "ignores --help" in ask_help(works_first, limit_s=2)
    assert time.monotonic() - t0 < 10
    by_hand = tmp_path / "by_hand.py"
    by_hand.write_text("import sys\nprint('records:', 10 if '--records' in sys.argv else 5)\n")
    out = ask_help(by_hand)
    assert out.returncode == 0 and not out.stdout.startswith("usage:")
    assert not MAIN_BLOCK.search(by_hand.read_text())
