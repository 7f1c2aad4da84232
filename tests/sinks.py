"""A predictions sink for tests: the runner's sink interface, recording what it is sent (the
Kafka sink itself is tested against the real broker)."""

from __future__ import annotations


class RecordingSink:
    def __init__(self):
        self.sent: list = []

    def send_json(self, value, key=None):
        self.sent.append((key, value))

    def flush(self):
        pass
