"""Commands built from State, outcomes, identities and the partitioner (pure, no broker)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from decider_support import CTX, REFUND_HASH, Scenario, create, propose_refund

from runfacts.ops.control import (
    ControlError,
    Issue,
    Outcome,
    find_approval,
    resume_command,
    retry_command,
    stop_command,
)
from runfacts.partitioning import murmur2, partition_for
from runfacts.processors.decider.core import decide
from runfacts.schemas.common import Actor
from runfacts.schemas.errors import ConfigError
from runfacts.security.identity import AuthenticationFailed, cli_identity, hash_secret, parse_users, verify_secret

ALICE = Actor(subjectId="alice", roles=("support_agent",), authSource="cli")
NOW = datetime(2026, 7, 27, 8, 41, tzinfo=UTC)


def _waiting():
    return Scenario().given(create(), propose_refund(at=NOW))


def test_resume_command_binds_version_and_args_hash_when_built_from_state():
    state = _waiting().s

    command = resume_command(state, "approval-tool-call-031", "approve", Issue(ALICE, "cmd-ops-1", NOW))

    assert command.expectedVersion == state.version
    assert command.payload.argsHash == REFUND_HASH
    assert command.actor.authSource == "cli" and command.correlationId == "ops:cmd-ops-1"
    events = decide(command, state, CTX)
    assert [e.eventType for e in events] == ["approval.granted", "tool.call.authorized", "run.resumed"]


def test_outcome_describes_typed_rejection_when_decider_rejects():
    state = _waiting().s
    command = stop_command(state, Issue(ALICE, "cmd-ops-2", NOW)).model_copy(update={"expectedVersion": 1})

    outcome = Outcome(command, tuple(decide(command, state, CTX)))

    assert not outcome.accepted
    assert outcome.rejection.reasonCode == "stale_version"
    assert outcome.describe().startswith("rejected run.stop [stale_version]")


def test_resume_command_names_known_approvals_when_id_is_unknown():
    with pytest.raises(ControlError, match="approval-tool-call-031"):
        resume_command(_waiting().s, "approval-nope", "approve", Issue(ALICE, "c", NOW))


def test_retry_command_names_known_calls_when_id_is_unknown():
    with pytest.raises(ControlError, match="no tool call tc-x"):
        retry_command(_waiting().s, "tc-x", Issue(ALICE, "c", NOW))


def test_retry_command_says_call_ended_when_it_is_compacted():
    state = _waiting().s.model_copy(update={"settledCalls": {"tc-old": ("failed/card_declined", "0123456789abcdef")}})

    with pytest.raises(ControlError, match=r"tc-old .* ended \(failed/card_declined\) and is compacted"):
        retry_command(state, "tc-old", Issue(ALICE, "c", NOW))


def test_find_approval_asks_for_run_when_two_runs_hold_the_id():
    one = _waiting().s
    two = one.model_copy(update={"runId": "run-other"})

    assert find_approval({one.runId: one}, "approval-tool-call-031") is one
    with pytest.raises(ControlError, match="--run"):
        find_approval({one.runId: one, two.runId: two}, "approval-tool-call-031")


def test_verify_secret_accepts_only_the_hashed_secret_when_checked():
    hashed = hash_secret("s3cret")

    assert verify_secret("s3cret", hashed)
    assert not verify_secret("s3cret!", hashed)
    assert not verify_secret("s3cret", "md5$abc")


def test_authenticate_fails_the_same_way_when_user_or_secret_is_wrong():
    users = parse_users(f'[users.olga]\nroles = ["operator"]\ntokens = ["{hash_secret("tok")}"]\n')

    assert users.authenticate("olga", "tok", tokens=True).roles == ("operator",)
    for name, secret in (("olga", "bad"), ("nobody", "tok")):
        with pytest.raises(AuthenticationFailed, match="unknown user or wrong secret"):
            users.authenticate(name, secret, tokens=True)
    with pytest.raises(AuthenticationFailed):
        users.authenticate("olga", "tok")  # tokens are for the CLI only


def test_parse_users_names_the_field_when_roles_are_missing():
    with pytest.raises(ConfigError, match="users.bob.roles"):
        parse_users('[users.bob]\npassword = "x"\n')


def test_cli_identity_reads_credentials_file_when_env_is_unset(tmp_path: Path):
    users = parse_users(f'[users.olga]\nroles = ["operator"]\ntokens = ["{hash_secret("tok")}"]\n')
    creds = tmp_path / "credentials.toml"
    creds.write_text('user = "olga"\ntoken = "tok"\n')
    os.chmod(creds, 0o644)

    with pytest.raises(ConfigError, match="chmod 600"):
        cli_identity(users, {"RUNFACTS_CREDENTIALS_FILE": str(creds)})
    os.chmod(creds, 0o600)
    identity = cli_identity(users, {"RUNFACTS_CREDENTIALS_FILE": str(creds)})
    assert identity.actor("cli") == Actor(subjectId="olga", roles=("operator",), authSource="cli")


def test_murmur2_matches_the_java_client_when_given_its_test_vectors():
    java = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
            b"a-little-bit-longer-string": -1486304829, b"abc": 479470107}
    for data, signed in java.items():
        assert murmur2(data) == signed & 0xFFFFFFFF
    assert partition_for(b"run-20260727001", 6) == (murmur2(b"run-20260727001") & 0x7FFFFFFF) % 6


def test_signed_approval_is_accepted_and_unsigned_refused_when_decider_requires_tokens():
    import dataclasses
    import json as _json

    from runfacts.processors.decider.security import approval_token_check
    from runfacts.processors.policy.approvals import parse_keyring
    from runfacts.processors.policy.keyring import new_secret
    from runfacts.security.approvals import ApprovalRequest, sign_approval

    keys = _json.dumps({"current": "k1", "keys": {"k1": new_secret()}})
    ctx = dataclasses.replace(CTX, verify_token=approval_token_check(parse_keyring(keys)))
    state = _waiting().s
    approval = state.approvals["approval-tool-call-031"]
    issue = Issue(ALICE, "cmd-signed", NOW)
    token = sign_approval(ApprovalRequest(state.runId, approval.approvalId, approval.argsHash, "approve", "alice"),
                          int(NOW.timestamp() * 1000), environ={"RUNFACTS_APPROVAL_KEYS": keys})

    signed = decide(resume_command(state, approval.approvalId, "approve", issue, token), state, ctx)
    unsigned = decide(resume_command(state, approval.approvalId, "approve", Issue(ALICE, "cmd-u", NOW)), state, ctx)

    assert token is not None and signed[0].eventType == "approval.granted"
    assert unsigned[0].payload.reasonCode == "token_missing"
    assert sign_approval(ApprovalRequest("r", "a", "h", "approve", "s"), 0, environ={}) is None
