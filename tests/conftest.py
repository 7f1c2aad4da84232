"""Shared test fixtures. Helper modules in this folder (``stattest``) import by name."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

REPO = HERE.parent


def _isolate_kafka_random() -> None:
    """Give kafka-python's modules a private random generator.

    kafka-python draws from the global ``random`` module in its background threads (reconnect
    jitter, broker and partition shuffles). A client still winding down after a Kafka test
    could then move the global state while Hypothesis generates another test's data, which
    Hypothesis reports (``HypothesisDeprecationWarning``, an error in later versions). The
    tests' own draws use ``random.Random(seed)`` instances and numpy generators.
    """
    import importlib
    import random

    private = random.Random()
    for name in ("kafka.net.manager", "kafka.net.connection", "kafka.net.socks5",
                 "kafka.net.http_connect", "kafka.net.compat", "kafka.cluster",
                 "kafka.consumer.subscription_state", "kafka.partitioner.default",
                 "kafka.partitioner.sticky"):
        try:
            module = importlib.import_module(name)
        except ImportError:   # another kafka-python layout: nothing of it to isolate
            continue
        if getattr(module, "random", None) is random:
            module.random = private


_isolate_kafka_random()


# `dpstream serve` refuses --seed in production (issue 65); the tests' serve processes inherit
# this and may pass one, so that their runs are reproducible
os.environ.setdefault("DPSTREAM_ALLOW_SEED", "1")


@pytest.fixture(autouse=True)
def _curator_copies():
    """The tests are the curator: they may pickle live models (state round trips), which
    users may only inside ``private_state_access()`` (tests/test_public_model.py checks the
    refusal outside it)."""
    from dpstream.models import private_state_access

    with private_state_access():
        yield
