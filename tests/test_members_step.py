"""Members that drain a backlog wait, after each of their closes, for the other members'
windows of the same stretch (issue 23), against a real broker (tansu)."""

from __future__ import annotations

import threading

import pytest
from test_members_hold import _close, _member, _until, adult_records

from dpstream.connectors.local_broker import LocalBroker
from dpstream.stream import members as members_mod

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def broker():
    b = LocalBroker().start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def records():
    return adult_records()


def test_after_its_close_a_draining_member_waits_for_the_others_windows(broker, tmp_path,
                                                                        records, monkeypatch):
    monkeypatch.setattr(members_mod, "WINDOWS_MAX_S", 30.0)
    stop = threading.Event()
    a, b = (_member(broker, tmp_path, n, stop, [p]) for n, p in (("a", 0), ("b", 1)))
    a.backlog = b.backlog = lambda: 5000   # both drain a backlog
    a.await_closes = b.await_closes = True
    done = []
    worker = threading.Thread(target=lambda: done.append(a.process_adopting(records[0][:300])))
    worker.start()                          # a closes its first window at record 150, then waits
    _until(lambda: a.runner.model.held is not None or a.runner.model.windows_closed > 0)
    worker.join(0.5)
    assert worker.is_alive() and a.runner.counters["learned"] == 256   # one piece, then waits
    assert b.process_many(records[1][:150]) == 150   # b closes; a's release is in: b grows
    _until(lambda: (b.poll(100), b.runner.model.held is None)[1])
    worker.join(30)
    assert done == [300] and not worker.is_alive()
    assert a.await_stats["waits"] == 1 and a.await_stats["timeouts"] == 0
    assert "b/window-000000000000" in a.ensemble.windows   # in the union before record 257
    _close(a, b)


def test_a_member_waits_only_while_it_drains_and_at_most_the_limit(broker, tmp_path, records,
                                                                   monkeypatch):
    monkeypatch.setattr(members_mod, "WINDOWS_MAX_S", 0.3)
    stop = threading.Event()
    a, b = (_member(broker, tmp_path, n, stop, [p]) for n, p in (("a", 0), ("b", 1)))
    a.backlog = lambda: 5000
    assert a.process_adopting(records[0][:300]) == 300   # the default: never waits
    assert a.await_stats["waits"] == 0
    a.await_closes = True
    a.backlog = lambda: 10                   # keeping up: never waits
    assert a.process_adopting(records[0][300:450]) == 150
    assert a.await_stats == {"waits": 0, "waited_s": 0.0, "timeouts": 0}
    a.backlog = lambda: 5000                 # draining; b never trains: the wait is bounded
    assert a.process_adopting(records[0][450:600]) == 150
    assert a.await_stats["timeouts"] >= 1 and 0.3 <= a.await_stats["waited_s"] < 5
    assert a.runner.model.__dict__["member_union"]["awaits"]["timeouts"] >= 1
    _close(a, b)
