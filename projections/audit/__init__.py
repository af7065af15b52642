"""The audit trail: one hash-chained record per event, and its verification.

Pure: reducer (the hash-chain step), summary (what a record says, PII digested), check
(chain checks). Shell: verify (`runfacts audit verify` against the events log).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

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


__getattr__ = lazy_names(__name__, _HOME)
