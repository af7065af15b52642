"""Crypto-shredding of personal fields (issue 23): protect/reveal round trips, erasure, garbling.

Property: for random commands of every current type with random personal text,
reveal(protect(x)) == x; after the subject's keys are erased every personal field reads
`[erased]`, and no reader raises on a garbled or moved value.
"""

from __future__ import annotations

import json
import string
from typing import Any

import pytest
from decider_support import OPERATOR, RUN, SUPPORT, USER, Scenario, command, create, policy_ctx, propose_refund, resume  # noqa: I001
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runfacts.privacy import ENCRYPTED, ERASED, NO_KEYS, UNREADABLE, KeyTable, protect, reveal, reveal_dict
from runfacts.privacy.envelope import SEALED_PREFIX, b64, decode_record, is_protected, pseudonym, subject_ref
from runfacts.privacy.fields import _apply
from runfacts.privacy.keys import new_privacy_keys_json, parse_privacy_keys, random_nonce
from runfacts.processors.decider.commands.run import erasure_run_id
from runfacts.schemas import commands as cmd
from runfacts.schemas.catalog import default_catalog
from runfacts.schemas.codec import Codec
from runfacts.schemas.errors import ConfigError
from runfacts.schemas.pii import pii_paths
from runfacts.schemas.spec.samples import sample

codec = Codec()
KEYS = parse_privacy_keys(new_privacy_keys_json("kek-a"))
COMMANDS = sorted((e for e in default_catalog().current.values() if e.kind == "command" and pii_paths(e.type_name)),
                  key=lambda e: e.type_name)
TEXT = st.text(string.printable + "éß€✓", min_size=1, max_size=60).filter(lambda t: not is_protected(t))


class Topic:
    """A stand-in for the compacted keys topic: the last value per key (None = tombstone)."""

    def __init__(self) -> None:
        self.log: list[tuple[bytes, bytes | None]] = []

    def publish(self, key: bytes, value: bytes | None) -> None:
        self.log.append((key, value))

    def replayed(self, keys: Any = KEYS) -> KeyTable:
        table = KeyTable(keys, self.publish)
        for key, value in self.log:
            table.apply(key, value)
        return table


def _command(entry: Any, seed: int, text: str) -> Any:
    values = sample(entry, seed)
    for path in pii_paths(entry.type_name):
        _apply(values, path.split("."), path, lambda v, _p: text if isinstance(v, str) else v)
    return codec.decode(codec.encode_dict(values))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(COMMANDS), st.integers(1, 50), TEXT)
def test_reveal_gives_back_every_personal_field_when_protected_then_read(entry: Any, seed: int, text: str) -> None:
    topic = Topic()
    table = KeyTable(KEYS, topic.publish)
    command = _command(entry, seed, text)
    sealed = protect(command, table, random_nonce)
    data = codec.encode(sealed)
    assert text.encode() not in data or len(text) < 4  # a short text may occur by chance in the bytes
    stored = codec.decode(data)  # what a reader gets back from the topic
    view = topic.replayed().view()  # a reader that replayed the keys topic
    assert reveal_dict(stored.model_dump(), entry.type_name, view) == command.model_dump()
    # ids, hashes and every other field stay clear
    assert {k: v for k, v in stored.model_dump().items() if k not in ("payload", "actor")} == \
        {k: v for k, v in command.model_dump().items() if k not in ("payload", "actor")}


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(COMMANDS), st.integers(1, 50), TEXT)
def test_every_personal_field_reads_erased_when_the_subjects_keys_are_tombstoned(entry: Any, seed: int,
                                                                                 text: str) -> None:
    topic = Topic()
    table = KeyTable(KEYS, topic.publish)
    command = _command(entry, seed, text)
    sealed = protect(command, table, random_nonce)
    for ref in {r.ref for r in table.records.values()}:
        table.erase(ref)
    shown = reveal_dict(codec.decode(codec.encode(sealed)).model_dump(), entry.type_name, topic.replayed().view())
    for path in pii_paths(entry.type_name):
        _apply(shown, path.split("."), path, lambda v, p: _assert_erased(v, p))


def _assert_erased(value: Any, path: str) -> Any:
    assert value is None or value == "" or value == ERASED, (path, value)
    return value


def test_no_reader_raises_when_a_sealed_value_is_garbled_or_moved() -> None:
    table = KeyTable(KEYS, lambda k, v: None)
    sealed = protect(create(), table, random_nonce).payload.goalSummary
    view = table.view()
    assert reveal(sealed, "goalSummary", view) == "refund order-001"
    assert reveal(sealed, "reason", view) == UNREADABLE  # bound to its field
    for cut in range(len(SEALED_PREFIX), len(sealed)):
        assert reveal(sealed[:cut], "goalSummary", view) in (UNREADABLE, ERASED)
    flipped = sealed[:-3] + ("A" if sealed[-3] != "A" else "B") + sealed[-2:]
    assert reveal(flipped, "goalSummary", view) == UNREADABLE
    assert reveal("rfp1.not-a-ref", "userId", view) == UNREADABLE
    assert reveal(sealed, "goalSummary", NO_KEYS) == ENCRYPTED  # a reader without keys
    assert reveal("plain from an older record", "goalSummary", view) == "plain from an older record"
    assert reveal(None, "comment", view) is None


def test_decider_copies_ciphertext_and_compares_pseudonyms_when_commands_are_protected() -> None:
    table = KeyTable(KEYS, lambda k, v: None)
    s = Scenario().given(protect(create(), table, random_nonce))
    subject = s.s.userId
    s.given(protect(propose_refund(), table, random_nonce, subject=subject))
    s.when(protect(resume(), table, random_nonce))
    assert [e.eventType for e in s.last] == ["approval.granted", "tool.call.authorized", "run.resumed"]
    created = s.log[0]
    view = table.view()
    assert reveal(created.payload.goalSummary, "goalSummary", view) == "refund order-001"
    assert reveal(created.payload.userId, "userId", view) == "customer-42"
    assert reveal(created.payload.actor.subjectId, "subjectId", view) == USER.subjectId
    required = next(e for e in s.log if e.eventType == "approval.required")
    assert reveal(required.payload.summary, "summary", view) == "Refund 42.00 EUR for order-001"
    assert s.s.approvals["approval-tool-call-031"].decidedBy == pseudonym(SUPPORT.subjectId, KEYS)
    assert s.s.runId == RUN and s.s.userId == pseudonym("customer-42", KEYS)


def test_self_approval_still_refused_when_actors_are_pseudonyms() -> None:
    table = KeyTable(KEYS, lambda k, v: None)
    s = Scenario().given(protect(create(), table, random_nonce),
                         protect(propose_refund(), table, random_nonce))
    creator_as_approver = USER.model_copy(update={"roles": ("support_agent",)})  # user-7 created the run
    s.when(protect(resume(actor=creator_as_approver), table, random_nonce)).rejected("self_approval_forbidden")


def test_protect_is_idempotent_when_a_command_is_protected_twice() -> None:
    table = KeyTable(KEYS, lambda k, v: None)
    once = protect(create(), table, random_nonce)
    assert protect(once, table, random_nonce) == once


def test_keys_survive_a_kek_rotation_when_rewrapped_and_the_old_kek_dropped() -> None:
    topic = Topic()
    sealed = protect(create(), KeyTable(KEYS, topic.publish), random_nonce)  # keys of customer-42 and user-7
    fresh = json.loads(new_privacy_keys_json("kek-b"))["keys"]
    pseudonym_key = b64(KEYS.pseudonym_key)
    both = parse_privacy_keys(json.dumps({"current": "kek-b", "keys": {**fresh, "kek-a": b64(KEYS.keks["kek-a"])},
                                          "pseudonymKey": pseudonym_key}))
    assert topic.replayed(both).rewrap() == 2
    only_new = parse_privacy_keys(json.dumps({"current": "kek-b", "keys": fresh, "pseudonymKey": pseudonym_key}))
    view = topic.replayed(only_new).view()
    assert reveal(sealed.payload.goalSummary, "goalSummary", view) == "refund order-001"
    assert reveal(sealed.payload.userId, "userId", view) == "customer-42"
    assert {decode_record(v).kek for _, v in topic.log[-2:] if v} == {"kek-b"}


@pytest.mark.parametrize("text, setting", [
    ("not json", "<privacy keys>"),
    ('{"current": "k", "keys": {"k": "c2hvcnQ"}, "pseudonymKey": "c2hvcnQ"}', "privacy key k"),
    ('{"current": "x", "keys": {}, "pseudonymKey": ""}', "<privacy keys>"),
    ('{"current": "k", "keys": {"k": "%%%"}, "pseudonymKey": "x"}', "<privacy keys>:keys.k"),
])
def test_config_error_names_the_setting_and_hides_the_secret_when_keys_are_bad(text: str, setting: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_privacy_keys(text)
    assert setting in str(raised.value) and "c2hvcnQ" not in str(raised.value)


# --- the erasure command, through the decider -------------------------------------------------

def _erase(ref: str, actor: Any = OPERATOR, run: str | None = None) -> Any:
    return command(cmd.EraseSubject, actor, run=run or erasure_run_id(ref), subjectRef=ref, requestRef="ticket-77")


def test_erase_records_subject_erased_without_the_subject_when_an_operator_erases() -> None:
    ref = subject_ref("customer-42", KEYS)
    erase = _erase(ref)
    s = Scenario(policy_ctx()).when(erase)
    fact = s.event("subject.erased")
    assert (fact.payload.subjectRef, fact.payload.requestRef, fact.runId) == (ref, "ticket-77", f"erasure-{ref}")
    assert b"customer-42" not in Codec().encode(fact)
    assert s.state is None  # an erasure is not a run
    assert Scenario(policy_ctx()).when(erase).last == s.last  # a re-sent erasure: the same fact (same event id)


def test_erase_rejected_when_the_actor_is_not_an_operator() -> None:
    ref = subject_ref("customer-42", KEYS)
    Scenario(policy_ctx()).when(_erase(ref, actor=SUPPORT)).rejected("forbidden_role")


def test_erase_rejected_when_the_subject_ref_is_an_id_or_the_run_id_does_not_match() -> None:
    Scenario().when(_erase("customer-42")).rejected("invalid_subject_ref")
    ref = subject_ref("customer-42", KEYS)
    Scenario().when(_erase(ref, run=RUN)).rejected("invalid_erasure_run")
    Scenario().given(create()).when(_erase(ref, run=RUN)).rejected("run_exists")


# --- the readers: views (dashboard) and the timeline (CLI) reveal through the one function --------

def test_views_and_timeline_show_plain_then_erased_when_the_subject_is_erased() -> None:
    from runfacts.client.timeline import row
    from runfacts.ops.views import revealed_view, view_of

    topic = Topic()
    table = KeyTable(KEYS, topic.publish)
    s = Scenario().given(protect(create(), table, random_nonce))
    view = view_of(s.s, "auditor")
    assert view is not None and view["auditor"]["goalSummary"].startswith(SEALED_PREFIX)  # the view copies it
    shown = revealed_view(view, topic.replayed().view())
    assert shown is not None
    assert (shown["auditor"]["userId"], shown["auditor"]["goalSummary"], shown["auditor"]["createdBy"]) == (
        "customer-42", "refund order-001", USER.subjectId)
    assert revealed_view(view_of(s.s, "user"), topic.replayed().view()) == view_of(s.s, "user")  # no detail
    assert "refund order-001" in row(0, s.log[0], topic.replayed().view()).detail
    table.erase(subject_ref("customer-42", KEYS))
    erased = revealed_view(view, topic.replayed().view())
    assert erased is not None and (erased["auditor"]["userId"], erased["auditor"]["goalSummary"]) == (ERASED, ERASED)
    assert "refund order-001" not in row(0, s.log[0], topic.replayed().view()).detail
    assert ERASED in row(0, s.log[0], topic.replayed().view()).detail
