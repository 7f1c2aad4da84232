"""``dpstream audit``: an empirical lower bound on epsilon from one training run, beside the
promised epsilon (Steinke, Nasr and Jagielski 2023; docs/privacy.md, "Auditing").

:mod:`~dpstream.stream.audit.canaries` builds the stream and its canaries,
:mod:`~dpstream.stream.audit.attacks` scores them from the public model file,
:mod:`~dpstream.stream.audit.audit_run` runs it all, and
:mod:`~dpstream.stream.audit.audit_cli` is the command. The arithmetic of the bound is
:mod:`dpstream.accounting.audit`.
"""

from __future__ import annotations

from .audit_cli import add_audit_parser

__all__ = ["add_audit_parser"]
