"""The simulated payment provider (`runfacts provider serve`): refunds, faults, a ledger.

Pure: book (the refund book). Shells: http (the request handler), server (PaymentSimulator).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runfacts.dev.provider.book import RefundBook
    from runfacts.dev.provider.server import PaymentSimulator, SimSettings

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {"PaymentSimulator": "server", "RefundBook": "book", "SimSettings": "server"}
__all__ = ["PaymentSimulator", "RefundBook", "SimSettings"]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
