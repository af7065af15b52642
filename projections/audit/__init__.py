"""The audit trail: one hash-chained record per event, and its verification.

Pure: reducer (the hash-chain step), summary (what a record says, PII digested), check
(chain checks). Shell: verify (`runfacts audit verify` against the events log).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runfacts.projections.audit.check import ChainCheck
    from runfacts.projections.audit.reducer import AuditRecord, ChainHead
    from runfacts.projections.audit.summary import AuditConfig
    from runfacts.projections.audit.verify import VerifyReport, verify

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {
    "AuditConfig": "summary",
    "AuditRecord": "reducer",
    "ChainCheck": "check",
    "ChainHead": "reducer",
    "VerifyReport": "verify",
    "verify": "verify",
}
__all__ = ["AuditConfig", "AuditRecord", "ChainCheck", "ChainHead", "VerifyReport", "verify"]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
