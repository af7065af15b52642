"""The simulated payment provider (`runfacts provider serve`): refunds, faults, a ledger.

Shells: book (the refund book; idempotency keys expire on a monotonic clock), http (the request
handler), server (PaymentSimulator).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

if TYPE_CHECKING:
    from runfacts.dev.provider.book import RefundBook
    from runfacts.dev.provider.server import PaymentSimulator, SimSettings

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {"PaymentSimulator": "server", "RefundBook": "book", "SimSettings": "server"}
__all__ = ["PaymentSimulator", "RefundBook", "SimSettings"]


__getattr__ = lazy_names(__name__, _HOME)
