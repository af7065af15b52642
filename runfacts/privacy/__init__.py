"""`runfacts.privacy`: crypto-shredding of personal fields (the right to erasure on an immutable log).

Every `"pii": true` field is protected at its source (client, outbox relay): free text sealed
with AES-256-GCM under a data key of its data subject, identities replaced by keyed
pseudonyms; data keys are wrapped by a key-encryption key and kept in the compacted
`<prefix>.keys` topic. Erasing a subject tombstones its keys; the log keeps its bytes (the
audit chain and replays are unchanged) and every reader shows `[erased]`.

Pure: `envelope` (seal, pseudonyms, key wrapping, THE `reveal`), `fields` (protect a command,
reveal a record's dict). Shells: `keys` (loading the KEKs from a secret file or the
environment; randomness), `store` (`KeyTable`, `KeyStore`: the keys topic).
"""

from runfacts.privacy.envelope import (
    ENCRYPTED,
    ERASED,
    NO_KEYS,
    UNREADABLE,
    KeyView,
    PrivacyKeys,
    is_protected,
    pseudonym,
    reveal,
    subject_ref,
)
from runfacts.privacy.fields import protect, reveal_dict
from runfacts.privacy.keys import load_privacy_keys, load_privacy_keys_if_configured, parse_privacy_keys
from runfacts.privacy.store import KeyStore, KeyTable

__all__ = [
    "ENCRYPTED", "ERASED", "NO_KEYS", "UNREADABLE", "KeyStore", "KeyTable", "KeyView", "PrivacyKeys",
    "is_protected", "load_privacy_keys", "load_privacy_keys_if_configured", "parse_privacy_keys", "protect",
    "pseudonym", "reveal", "reveal_dict", "subject_ref",
]
