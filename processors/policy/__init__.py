"""Policy: who may issue or approve what, the capability manifests, retry rules and approval
tokens, with the packaged defaults policy.toml and capabilities.toml beside them.

Pure: access (the access policy), capabilities (manifest parsing), retry (classification,
RetryPolicy, idempotency keys), approvals (approval-token verification). Loader: keyring
(reads approval keys from the environment or a secret file; the one I/O of this room).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runfacts.processors.policy.access import Policy, load_policy
    from runfacts.processors.policy.approvals import Keyring, verify_token
    from runfacts.processors.policy.capabilities import CapabilityCatalog, load_capabilities
    from runfacts.processors.policy.keyring import load_keyring_if_configured
    from runfacts.processors.policy.retry import ErrorClass, RetryPolicy

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {
    "CapabilityCatalog": "capabilities",
    "ErrorClass": "retry",
    "Keyring": "approvals",
    "Policy": "access",
    "RetryPolicy": "retry",
    "load_capabilities": "capabilities",
    "load_keyring_if_configured": "keyring",
    "load_policy": "access",
    "verify_token": "approvals",
}
__all__ = [
    "CapabilityCatalog",
    "ErrorClass",
    "Keyring",
    "Policy",
    "RetryPolicy",
    "load_capabilities",
    "load_keyring_if_configured",
    "load_policy",
    "verify_token",
]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
