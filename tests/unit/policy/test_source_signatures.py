"""Commands signed by their source (issue 20), the pure check: given keys and a record, when it
is checked, then it passes or is refused with one typed reason; plus key loading and fuzz."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runfacts.processors.policy.approvals import Keyring, SigningKey
from runfacts.processors.policy.keyring import (
    ENV_SOURCE_KEYS,
    ENV_SOURCE_KEYS_FILE,
    load_source_keys_if_configured,
    new_secret,
)
from runfacts.processors.policy.sources import (
    KEY_ID_HEADER,
    MAC_CONTEXT,
    SIGNATURE_HEADER,
    SOURCE_DENIALS,
    SourceKeys,
    check_source,
    parse_source_keys,
    require_signing_key,
    sign,
)
from runfacts.schemas.errors import ConfigError

CLI_KEY = SigningKey(b"c" * 32)
DSP_KEY = SigningKey(b"d" * 32)
KEYS = SourceKeys({"cli": Keyring(keys={"cli-1": CLI_KEY}, current="cli-1"),
                   "dispatcher": Keyring(keys={"dsp-1": DSP_KEY}, current="dsp-1")})
VALUE = b"\xc3\x01" + bytes(range(200))  # any record bytes: the check never parses them
NOW = 1_000_000


def reason(headers, source="cli", value=VALUE, keys=KEYS, now=NOW):
    found = check_source(keys, source, value, headers, now)
    return None if found is None else found.reason


def test_signed_record_passes_when_checked_against_its_own_source():
    # given a record signed by the CLI's current key / when checked for "cli" / then it passes
    assert reason(sign(KEYS, "cli", VALUE)) is None


def test_signature_is_hmac_sha256_over_context_source_kid_and_value():
    headers = dict(sign(KEYS, "cli", VALUE))
    expected = hmac.new(b"c" * 32, b"runfacts.command.v1\x00cli\x00cli-1\x00" + VALUE, hashlib.sha256).digest()
    assert headers[KEY_ID_HEADER] == b"cli-1"
    assert headers[SIGNATURE_HEADER] == base64.urlsafe_b64encode(expected).rstrip(b"=")


@settings(max_examples=200, deadline=None, database=None)
@given(secret=st.binary(min_size=32, max_size=200), value=st.binary(max_size=400),
       source=st.text(min_size=1, max_size=20).filter(str.strip))
def test_precomputed_hmac_equals_the_standard_library_for_any_key_length(secret, value, source):
    keys = SourceKeys({source: Keyring(keys={"k": SigningKey(secret)}, current="k")})
    signed = MAC_CONTEXT + source.encode() + b"\x00k\x00" + value
    assert keys.mac(source, "k", value) == hmac.digest(secret, signed, "sha256")


def test_unsigned_record_is_refused_as_missing():
    assert reason(None) == reason([]) == reason([("eventType", b"run.create")]) == "source_signature_missing"


def test_flipped_byte_anywhere_in_the_value_is_refused_as_invalid():
    headers = sign(KEYS, "cli", VALUE)
    for i in range(len(VALUE)):
        flipped = VALUE[:i] + bytes([VALUE[i] ^ 0x01]) + VALUE[i + 1:]
        assert reason(headers, value=flipped) == "source_signature_invalid", i


def test_writer_signing_with_its_own_key_cannot_claim_another_source():
    # given the dispatcher's key / when its record claims "cli" / then the key is not the CLI's
    assert reason(sign(KEYS, "dispatcher", VALUE), source="cli") == "source_key_unknown"


def test_signature_moved_to_another_source_with_the_same_kid_is_invalid():
    # given two sources that happen to share a key id but not the secret
    keys = SourceKeys({"cli": Keyring(keys={"k": CLI_KEY}, current="k"),
                       "dashboard": Keyring(keys={"k": DSP_KEY}, current="k")})
    assert reason(sign(keys, "dashboard", VALUE), source="cli", keys=keys) == "source_signature_invalid"
    # and the same secret under two sources still does not verify across them: the source is signed
    same = SourceKeys({"cli": Keyring(keys={"k": CLI_KEY}, current="k"),
                       "dashboard": Keyring(keys={"k": CLI_KEY}, current="k")})
    assert reason(sign(same, "dashboard", VALUE), source="cli", keys=same) == "source_signature_invalid"


def test_source_without_keys_is_refused_as_unknown_key():
    assert reason(sign(KEYS, "cli", VALUE), source="agent-harness") == "source_key_unknown"


def test_retired_key_is_refused_as_retired_not_unknown():
    retired = SourceKeys({"cli": Keyring(keys={"cli-2": CLI_KEY}, current="cli-2", retired=frozenset({"cli-1"}))})
    assert reason(sign(KEYS, "cli", VALUE), keys=retired) == "source_key_retired"


def test_key_past_verify_until_is_retired_and_valid_before():
    grace = SourceKeys({"cli": Keyring(keys={"cli-1": SigningKey(CLI_KEY.secret, verify_until_ms=NOW)})})
    headers = sign(KEYS, "cli", VALUE)
    assert reason(headers, keys=grace, now=NOW - 1) is None
    assert reason(headers, keys=grace, now=NOW) == "source_key_retired"


def test_rotation_keeps_old_signatures_valid_in_the_grace_period():
    rotated = SourceKeys({"cli": Keyring(keys={"cli-1": CLI_KEY, "cli-2": SigningKey(b"n" * 32)}, current="cli-2")})
    assert dict(sign(rotated, "cli", VALUE))[KEY_ID_HEADER] == b"cli-2"
    assert reason(sign(KEYS, "cli", VALUE), keys=rotated) is None
    assert reason(sign(rotated, "cli", VALUE), keys=rotated) is None


@pytest.mark.parametrize("headers", [
    [(KEY_ID_HEADER, b"cli-1")],  # one header only
    [(SIGNATURE_HEADER, b"A" * 43)],
    [(KEY_ID_HEADER, b"cli 1"), (SIGNATURE_HEADER, b"A" * 43)],  # not a key id
    [(KEY_ID_HEADER, None), (SIGNATURE_HEADER, b"A" * 43)],
    [(KEY_ID_HEADER, b"cli-1"), (SIGNATURE_HEADER, b"A" * 42)],  # wrong length
    [(KEY_ID_HEADER, b"cli-1"), (SIGNATURE_HEADER, b"!" * 43)],  # not base64url
    [(KEY_ID_HEADER, b"cli-1"), (SIGNATURE_HEADER, None)],
    [(KEY_ID_HEADER, b"\xff\xfe"), (SIGNATURE_HEADER, b"A" * 43)],
    [(KEY_ID_HEADER, b"cli-1"), (SIGNATURE_HEADER, b"A" * 43 + b"\n")],  # a regex `$` would let it by
])
def test_malformed_signature_headers_are_refused_as_invalid(headers):
    assert reason(headers) == "source_signature_invalid"


def test_repeated_signature_headers_are_refused_even_when_one_is_valid():
    good = sign(KEYS, "cli", VALUE)
    assert reason(good + [(SIGNATURE_HEADER, b"A" * 43)]) == "source_signature_invalid"
    assert reason(good + good) == "source_signature_invalid"


def test_refusal_detail_names_source_and_key_but_no_secret():
    found = check_source(KEYS, "cli", VALUE + b"x", sign(KEYS, "cli", VALUE), NOW)
    assert found is not None and "cli-1" in str(found) and "'cli'" in str(found)
    assert "c" * 32 not in str(found) and "c" * 32 not in repr(KEYS)


def test_signer_without_a_key_for_its_source_fails_naming_the_source_and_the_fix():
    with pytest.raises(ConfigError, match="'outbox:support-desk'.*RUNFACTS_SOURCE_KEYS"):
        sign(KEYS, "outbox:support-desk", VALUE)
    verify_only = SourceKeys({"cli": Keyring(keys={"cli-1": CLI_KEY})})  # no current: cannot sign
    with pytest.raises(ConfigError, match="no current key"):
        require_signing_key(verify_only, "cli")


@settings(max_examples=300, deadline=None, database=None)
@given(kid=st.one_of(st.none(), st.binary(max_size=80)), sig=st.one_of(st.none(), st.binary(max_size=80)),
       extra=st.lists(st.tuples(st.sampled_from([KEY_ID_HEADER, SIGNATURE_HEADER, "x"]),
                                st.one_of(st.none(), st.binary(max_size=60))), max_size=3))
def test_random_bytes_in_the_signature_fields_give_a_typed_reason_never_an_exception(kid, sig, extra):
    headers = [(KEY_ID_HEADER, kid), (SIGNATURE_HEADER, sig), *extra]
    assert reason(headers) in SOURCE_DENIALS


@settings(max_examples=200, deadline=None, database=None)
@given(sig=st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", min_size=43,
                   max_size=43))
def test_random_well_formed_signature_under_a_real_key_is_invalid(sig):
    assert reason([(KEY_ID_HEADER, b"cli-1"), (SIGNATURE_HEADER, sig.encode())]) == "source_signature_invalid"


def _keys_json() -> str:
    return json.dumps({"cli": {"current": "cli-1", "keys": {"cli-1": new_secret()}},
                       "dispatcher": {"current": "dsp-2", "keys": {"dsp-2": new_secret()}, "retired": ["dsp-1"]}})


def test_source_keys_load_from_the_environment_json():
    keys = load_source_keys_if_configured({ENV_SOURCE_KEYS: _keys_json()})
    assert keys is not None and sorted(keys.keyrings) == ["cli", "dispatcher"]
    assert keys.keyrings["dispatcher"].retired == frozenset({"dsp-1"})


def test_source_keys_are_not_configured_when_neither_variable_is_set():
    assert load_source_keys_if_configured({}) is None


def test_source_keys_file_must_be_mode_600(tmp_path):
    path = tmp_path / "sources.json"
    path.write_text(_keys_json())
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match=f"{ENV_SOURCE_KEYS_FILE}.*chmod 600"):
        load_source_keys_if_configured({ENV_SOURCE_KEYS_FILE: str(path)})
    os.chmod(path, 0o600)
    keys = load_source_keys_if_configured({ENV_SOURCE_KEYS_FILE: str(path)})
    assert keys is not None and "cli" in keys.keyrings


@pytest.mark.parametrize("text", ["not json", "[]", "{}", '{"cli": {"keys": {"k": "c2hvcnQ"}}}',
                                  '{"cli": {"keys": {}, "other": 1}}'])
def test_bad_source_keys_raise_config_error_without_echoing_secrets(text):
    with pytest.raises(ConfigError) as info:
        parse_source_keys(text, ENV_SOURCE_KEYS)
    assert ENV_SOURCE_KEYS in str(info.value) and "c2hvcnQ" not in str(info.value)
