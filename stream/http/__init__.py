"""The HTTP side of a serve process, beside ``/metrics`` (:mod:`dpstream.stream.metrics`).

=====================  ==============================================================
``api``                ``POST /predict`` and ``GET /model`` from a snapshot of the public
                       model, and ``dpstream serve-model`` (docs/service.md#http-predictions)
``page``               the status page at ``/`` and ``dpstream status --html``
=====================  ==============================================================
"""

from __future__ import annotations
