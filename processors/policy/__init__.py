"""Policy: who may issue or approve what, the capability manifests, retry rules and approval
tokens, with the packaged defaults policy.toml and capabilities.toml beside them.

Pure: access (the access policy), capabilities (manifest parsing), retry (classification,
RetryPolicy, idempotency keys), approvals (approval-token verification), sources (commands
signed by their source: sign and check), display (a call's argument display: render, digest,
validation against the tool's schema, the approval rule), compensation (a compensating call's
arguments derived from the original call's arguments and result). Loader: keyring (reads approval and source keys from
the environment or a secret file; the one I/O of this room).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

if TYPE_CHECKING:
    from runfacts.processors.policy.access import Policy, load_policy
    from runfacts.processors.policy.approvals import Keyring, verify_token
    from runfacts.processors.policy.capabilities import CapabilityCatalog, load_capabilities
    from runfacts.processors.policy.keyring import load_keyring_if_configured, load_source_keys_if_configured
    from runfacts.processors.policy.retry import ErrorClass, RetryPolicy
    from runfacts.processors.policy.sources import SourceKeys, check_source, sign

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {
    "CapabilityCatalog": "capabilities",
    "ErrorClass": "retry",
    "Keyring": "approvals",
    "Policy": "access",
    "RetryPolicy": "retry",
    "SourceKeys": "sources",
    "check_source": "sources",
    "load_capabilities": "capabilities",
    "load_keyring_if_configured": "keyring",
    "load_policy": "access",
    "load_source_keys_if_configured": "keyring",
    "sign": "sources",
    "verify_token": "approvals",
}
__all__ = [
    "CapabilityCatalog",
    "ErrorClass",
    "Keyring",
    "Policy",
    "RetryPolicy",
    "SourceKeys",
    "check_source",
    "load_capabilities",
    "load_keyring_if_configured",
    "load_policy",
    "load_source_keys_if_configured",
    "sign",
    "verify_token",
]


__getattr__ = lazy_names(__name__, _HOME)
