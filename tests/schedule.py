"""S-GBDT's documented round schedule, restated independently of the model: the rounds a
stream of ``n`` messages gets (docs/sgbdt.md, "Young streams: the young phase"). Tests that
count rounds of a default model check the model against this oracle."""

from __future__ import annotations


def sgbdt_rounds(n: int, *, round_size: int = 256, warmup_rounds: int = 400,
                 warmup_records: int = 2000) -> int:
    """Rounds after ``n`` arrivals of one generation (no ``pool_rounds``): a round every
    ``min(round_size, ceil(a / warmup_rounds))`` arrivals while ``a < warmup_records``, every
    ``round_size`` after.

    >>> sgbdt_rounds(600), sgbdt_rounds(600, warmup_rounds=0), sgbdt_rounds(48842)
    (500, 2, 1095)
    """
    arrived = buffered = rounds = 0
    for _ in range(n):
        arrived += 1
        buffered += 1
        every = round_size
        if warmup_rounds and arrived < warmup_records:
            every = min(round_size, -(-arrived // warmup_rounds))
        if buffered >= every:
            rounds, buffered = rounds + 1, 0
    return rounds
