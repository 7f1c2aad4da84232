"""Which Kafka client reads the records and writes the predictions and dead letters.

kafka-python (:mod:`dpstream.connectors.kafka`, the default) or confluent-kafka
(:mod:`dpstream.connectors.kafka_confluent`, ``pip install 'dpstream[fast]'``) behind one
interface; :func:`resolve_kafka_client` with ``auto`` takes confluent-kafka when it imports.
See docs/connectors.md#choosing-a-kafka-client.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["CLIENTS", "CHOICES", "resolve_kafka_client", "client_version", "kafka_source",
           "kafka_sink", "kafka_dead_letter_sink"]

#: the clients, by the names ``--kafka-client`` takes
CLIENTS = ("kafka-python", "confluent")
#: what ``--kafka-client`` accepts
CHOICES = ("auto", *CLIENTS)
INSTALL = "pip install 'dpstream[fast]'"


def _confluent_installed() -> bool:
    try:
        importlib.import_module("confluent_kafka")
    except ImportError:
        return False
    return True


def resolve_kafka_client(name: str | None = "auto") -> str:
    """The client to use: ``name`` itself, or for ``auto`` (and ``None``) ``confluent`` when
    confluent-kafka imports, else ``kafka-python``. An unknown name, or ``confluent`` where
    confluent-kafka is not installed, raises :class:`ValueError` saying how to install it.

    Examples
    --------
    >>> resolve_kafka_client("kafka-python")
    'kafka-python'
    >>> resolve_kafka_client("auto") in CLIENTS
    True
    >>> resolve_kafka_client("librdkafka")
    Traceback (most recent call last):
    ...
    ValueError: unknown Kafka client 'librdkafka': choose auto, kafka-python or confluent ...
    """
    if name is None or name == "auto":
        return "confluent" if _confluent_installed() else "kafka-python"
    if name not in CLIENTS:
        raise ValueError(f"unknown Kafka client {name!r}: choose {', '.join(CHOICES[:-1])} or "
                         f"{CHOICES[-1]} (confluent-kafka: {INSTALL})")
    if name == "confluent" and not _confluent_installed():
        raise ValueError(f"--kafka-client confluent needs the confluent-kafka package, which "
                         f"is not installed: {INSTALL}")
    return name


def client_version(client: str) -> str:
    """``client`` and its version, for the log line naming the chosen client."""
    if client == "confluent":
        import confluent_kafka

        version = confluent_kafka.version()
        version = version[0] if isinstance(version, tuple) else version
        return f"confluent-kafka {version} (librdkafka {confluent_kafka.libversion()[0]})"
    import kafka

    return f"kafka-python {getattr(kafka, '__version__', '?')}"


#: the class of each role on each client (kafka-python's, confluent-kafka's)
_CLASSES = {"source": ("KafkaSource", "ConfluentSource"),
            "sink": ("KafkaSink", "ConfluentSink"),
            "dead_letter_sink": ("KafkaDeadLetterSink", "ConfluentDeadLetterSink")}


def _build(role: str, client: str | None, args: tuple, kwargs: dict) -> Any:
    confluent = resolve_kafka_client(client) == "confluent"
    module = importlib.import_module(".kafka_confluent" if confluent else ".kafka",
                                     __package__)
    return getattr(module, _CLASSES[role][confluent])(*args, **kwargs)


def kafka_source(client: str | None, *args: Any, **kwargs: Any) -> Any:
    """A :class:`~dpstream.connectors.kafka.KafkaSource` or a
    :class:`~dpstream.connectors.kafka_confluent.ConfluentSource` (``client`` as for
    :func:`resolve_kafka_client`; the other arguments are the source's)."""
    return _build("source", client, args, kwargs)


def kafka_sink(client: str | None, *args: Any, **kwargs: Any) -> Any:
    """A :class:`~dpstream.connectors.kafka.KafkaSink` or a
    :class:`~dpstream.connectors.kafka_confluent.ConfluentSink`."""
    return _build("sink", client, args, kwargs)


def kafka_dead_letter_sink(client: str | None, *args: Any, **kwargs: Any) -> Any:
    """A :class:`~dpstream.connectors.kafka.KafkaDeadLetterSink` or a
    :class:`~dpstream.connectors.kafka_confluent.ConfluentDeadLetterSink`."""
    return _build("dead_letter_sink", client, args, kwargs)
