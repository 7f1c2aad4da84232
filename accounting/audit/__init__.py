"""Empirical privacy auditing: an epsilon lower bound from one run's canaries
(:mod:`~dpstream.accounting.audit.one_run`; docs/privacy.md, "Auditing")."""

from __future__ import annotations

from .one_run import (
    DEFAULT_RULES,
    AuditBound,
    GuessRule,
    audit_scores,
    epsilon_lower_bound,
    guess,
    p_value,
)

__all__ = ["AuditBound", "DEFAULT_RULES", "GuessRule", "audit_scores", "epsilon_lower_bound",
           "guess", "p_value"]
