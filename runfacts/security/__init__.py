"""Security administration: Kafka ACLs and SCRAM users, the users file, approval signing.

Shells: acls (ACL entries per component, SCRAM admin), identity (users file, hashed
secrets), approvals (sign an approval token with a key from the environment; verification is
processors.policy, pure).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfacts.doorway import lazy_names

if TYPE_CHECKING:
    from runfacts.security.acls import acl_entries, component_access
    from runfacts.security.approvals import sign_approval
    from runfacts.security.identity import UserDirectory

# the doorway is lazy: importing one module of this room does not load the others
_HOME = {
    "UserDirectory": "identity",
    "acl_entries": "acls",
    "component_access": "acls",
    "sign_approval": "approvals",
}
__all__ = ["UserDirectory", "acl_entries", "component_access", "sign_approval"]


__getattr__ = lazy_names(__name__, _HOME)
