"""Signed approval tokens: every rejection reason, key rotation, keyring loading."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import replace

import pytest

from runfacts.processors.policy import approvals as approval_tokens
from runfacts.processors.policy.approvals import (
    ApprovalClaims,
    Keyring,
    SigningKey,
    issue_token,
    parse_keyring,
    verify_token,
)
from runfacts.processors.policy.keyring import ENV_KEYS, ENV_KEYS_FILE, load_keyring, new_secret
from runfacts.schemas.errors import ConfigError

K1 = SigningKey(b"1" * 32)
K2 = SigningKey(b"2" * 32)
RING = Keyring(keys={"k1": K1}, current="k1")
CLAIMS = ApprovalClaims(run_id="run-1", approval_id="approval-tc-1", args_hash="sha256:ab12",
                        decision="approve", subject_id="bob", expires_at_ms=1_000_000)
BINDING = CLAIMS.binding()
NOW = 999_000


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(secret: bytes, kid: str, payload: bytes) -> str:
    """A correctly signed token over arbitrary payload bytes (as a buggy issuer would make)."""
    signed = f"v{2 if b'displayDigest' in payload else 1}.{kid}.{b64(payload)}"
    mac = hmac.new(secret, b"runfacts.approval." + signed.encode(), hashlib.sha256).digest()
    return f"{signed}.{b64(mac)}"


def test_verify_token_accepts_when_token_matches_binding_and_is_unexpired():
    token = issue_token(RING, "k1", CLAIMS)
    assert token.startswith("v2.k1.")
    assert verify_token(RING, token, BINDING, NOW) is None


@pytest.mark.parametrize("token", [None, ""])
def test_verify_token_rejects_token_missing_when_absent(token):
    assert verify_token(RING, token, BINDING, NOW) == "token_missing"


@pytest.mark.parametrize("mangle", [
    lambda t: t.replace("v2.", "v3.", 1),
    lambda t: t + ".extra",
    lambda t: t.rsplit(".", 1)[0],
    lambda t: t[:-3] + "!!!",
    lambda t: t[:-2],  # signature of the wrong length
    lambda t: t.replace(".k1.", ".k.1.", 1),
    lambda t: t + "A" * approval_tokens.MAX_TOKEN_CHARS,
    lambda t: "not a token",
])
def test_verify_token_rejects_token_malformed_when_structure_is_wrong(mangle):
    assert verify_token(RING, mangle(issue_token(RING, "k1", CLAIMS)), BINDING, NOW) == "token_malformed"


@pytest.mark.parametrize("payload", [
    b"not json",
    b"[]",
    json.dumps({"runId": "run-1"}).encode(),
    json.dumps({**{k: "x" for k in ("runId", "approvalId", "argsHash", "decision", "subjectId")},
                "expiresAtMs": "soon"}).encode(),
])
def test_verify_token_rejects_token_malformed_when_signed_payload_is_not_claims(payload):
    assert verify_token(RING, forge(K1.secret, "k1", payload), BINDING, NOW) == "token_malformed"


def test_verify_token_rejects_token_unknown_key_when_kid_not_in_keyring():
    other = Keyring(keys={"k9": K2})
    assert verify_token(RING, issue_token(other, "k9", CLAIMS), BINDING, NOW) == "token_unknown_key"


def test_verify_token_rejects_token_bad_signature_when_payload_is_tampered():
    _, kid, _, sig = issue_token(RING, "k1", CLAIMS).split(".")
    evil = replace(CLAIMS, args_hash="sha256:ffff")
    _, _, evil_payload, _ = issue_token(RING, "k1", evil).split(".")
    assert verify_token(RING, f"v2.{kid}.{evil_payload}.{sig}", evil.binding(), NOW) == "token_bad_signature"


def test_verify_token_rejects_token_bad_signature_when_signed_with_other_secret_under_same_kid():
    impostor = Keyring(keys={"k1": K2})
    assert verify_token(RING, issue_token(impostor, "k1", CLAIMS), BINDING, NOW) == "token_bad_signature"


def test_verify_token_rejects_token_bad_signature_when_kid_is_swapped():
    ring = Keyring(keys={"k1": K1, "k2": K2}, current="k2")
    token = issue_token(ring, "k1", CLAIMS).replace(".k1.", ".k2.", 1)
    assert verify_token(ring, token, BINDING, NOW) == "token_bad_signature"


@pytest.mark.parametrize("now", [CLAIMS.expires_at_ms, CLAIMS.expires_at_ms + 1])
def test_verify_token_rejects_token_expired_when_now_reaches_expiry(now):
    assert verify_token(RING, issue_token(RING, "k1", CLAIMS), BINDING, now) == "token_expired"


@pytest.mark.parametrize("field", ["run_id", "approval_id", "args_hash", "decision", "subject_id", "display_digest"])
def test_verify_token_rejects_token_claims_mismatch_when_any_bound_field_differs(field):
    other = replace(BINDING, **{field: "reject" if field == "decision" else "other"})
    assert verify_token(RING, issue_token(RING, "k1", CLAIMS), other, NOW) == "token_claims_mismatch"


def v1_token(claims: ApprovalClaims) -> str:
    """A token as runfacts before issue 33 issued it (claims without displayDigest)."""
    body = {"runId": claims.run_id, "approvalId": claims.approval_id, "argsHash": claims.args_hash,
            "decision": claims.decision, "subjectId": claims.subject_id, "expiresAtMs": claims.expires_at_ms}
    return forge(K1.secret, "k1", json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def test_a_v1_token_verifies_only_for_an_approval_without_a_display():
    assert verify_token(RING, v1_token(CLAIMS), BINDING, NOW) is None
    shown = replace(BINDING, display_digest="d" * 64)
    assert verify_token(RING, v1_token(CLAIMS), shown, NOW) == "token_claims_mismatch"


def test_a_v2_token_binds_the_display_digest_the_approver_saw():
    claims = replace(CLAIMS, display_digest="d" * 64)
    token = issue_token(RING, "k1", claims)
    assert verify_token(RING, token, claims.binding(), NOW) is None
    assert verify_token(RING, token, replace(claims.binding(), display_digest="e" * 64), NOW) == "token_claims_mismatch"
    assert verify_token(RING, token, BINDING, NOW) == "token_claims_mismatch"  # a digest where none was shown


def test_verify_token_compares_signature_in_constant_time_when_checking(monkeypatch):
    calls = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(approval_tokens.hmac, "compare_digest", spy)
    assert verify_token(RING, issue_token(RING, "k1", CLAIMS), BINDING, NOW) is None
    assert len(calls) == 1


def test_keyring_rotation_accepts_old_key_in_grace_and_rejects_it_when_retired():
    old_token = issue_token(RING, "k1", CLAIMS)
    rotated = Keyring(keys={"k1": K1, "k2": K2}, current="k2")
    new_token = issue_token(rotated, rotated.current, CLAIMS)
    assert new_token.startswith("v2.k2.")
    assert verify_token(rotated, old_token, BINDING, NOW) is None
    assert verify_token(rotated, new_token, BINDING, NOW) is None
    retired = Keyring(keys={"k2": K2}, current="k2", retired=frozenset({"k1"}))
    assert verify_token(retired, old_token, BINDING, NOW) == "token_retired_key"
    assert verify_token(retired, new_token, BINDING, NOW) is None


def test_keyring_rotation_rejects_token_retired_key_when_grace_period_ends():
    ring = Keyring(keys={"k1": replace(K1, verify_until_ms=NOW), "k2": K2}, current="k2")
    token = issue_token(ring, "k1", CLAIMS)
    assert verify_token(ring, token, BINDING, NOW - 1) is None
    assert verify_token(ring, token, BINDING, NOW) == "token_retired_key"


@pytest.mark.parametrize("kid", ["k0", "k2"])
def test_issue_token_raises_config_error_when_key_is_unknown_or_retired(kid):
    ring = Keyring(keys={"k1": K1}, retired=frozenset({"k0"}))
    with pytest.raises(ConfigError, match=kid):
        issue_token(ring, kid, CLAIMS)


@pytest.mark.parametrize(("kwargs", "names"), [
    ({"keys": {"k1": SigningKey(b"short")}}, "shorter than 32"),
    ({"keys": {"k.1": K1}}, "k.1"),
    ({"keys": {"k1": K1}, "retired": frozenset({"k1"})}, "retired"),
    ({"keys": {"k1": K1}, "current": "k2"}, "current"),
])
def test_keyring_raises_config_error_when_keys_are_inconsistent(kwargs, names):
    with pytest.raises(ConfigError, match=names):
        Keyring(**kwargs)


def test_keyring_repr_hides_secrets_when_printed():
    assert "1111" not in repr(RING) and "secret" not in repr(RING)


def test_parse_keyring_reads_keys_when_json_has_strings_and_objects():
    text = json.dumps({"current": "k2", "retired": ["k0"], "keys": {
        "k1": {"secret": base64.b64encode(K1.secret).decode(), "verifyUntilMs": 5},
        "k2": b64(K2.secret)}})
    ring = parse_keyring(text)
    assert ring.keys["k1"] == SigningKey(K1.secret, 5) and ring.keys["k2"] == K2
    assert (ring.current, ring.retired) == ("k2", frozenset({"k0"}))


@pytest.mark.parametrize("text", [
    "nope", "[]", json.dumps({"keys": {"k1": "###"}}), json.dumps({"keys": {}, "owner": 1}),
    json.dumps({"keys": {"k1": {"secret": b64(K1.secret), "verifyUntilMs": "later"}}}),
    json.dumps({"keys": {"k1": b64(b"x" * 8)}}),
])
def test_parse_keyring_raises_config_error_without_echoing_secrets_when_invalid(text):
    with pytest.raises(ConfigError) as info:
        parse_keyring(text, "keys.json")
    assert "keys.json" in str(info.value) and "###" not in str(info.value) and b64(b"x" * 8) not in str(info.value)


def keyring_json() -> str:
    return json.dumps({"current": "k1", "keys": {"k1": new_secret()}})


def test_load_keyring_reads_json_when_env_holds_keys():
    ring = load_keyring(environ={ENV_KEYS: keyring_json()})
    assert ring.current == "k1" and len(ring.keys["k1"].secret) == 32


def test_load_keyring_reads_secret_file_when_env_names_it(tmp_path):
    path = tmp_path / "approval-keys.json"
    path.write_text(keyring_json())
    path.chmod(0o600)
    assert load_keyring(environ={ENV_KEYS_FILE: str(path), ENV_KEYS: "ignored"}).current == "k1"
    assert load_keyring(path, environ={}).current == "k1"


def test_load_keyring_raises_config_error_when_file_is_group_readable(tmp_path):
    path = tmp_path / "approval-keys.json"
    path.write_text(keyring_json())
    path.chmod(0o640)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_keyring(path, environ={})


def test_load_keyring_raises_config_error_when_nothing_is_configured(tmp_path):
    with pytest.raises(ConfigError, match=ENV_KEYS_FILE):
        load_keyring(environ={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_keyring(tmp_path / "missing.json", environ={})
