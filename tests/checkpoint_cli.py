"""What the checkpoint tests share: the real CLI in a subprocess, an environment without a
checkpoint key unless a test sets one, and the Adult records."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dpstream.connectors.checkpoint import KEY_ENV
from dpstream.stream import load_adult

DPSTREAM = [sys.executable, "-m", "dpstream.stream.cli"]


@pytest.fixture(autouse=True)
def _no_key_from_the_environment(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    env.update(extra)
    return env


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([*DPSTREAM, *args], capture_output=True, text=True, timeout=300,
                          env=_env(**env))


@pytest.fixture(scope="module")
def adult():
    X, y, _ = load_adult("train")
    return X, y
