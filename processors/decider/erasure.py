"""The erasure of a data subject, pure: `subject.erase` -> `subject.erased` (docs/security.md).

Erasure is not a run: its command carries runId `erasure-<subjectRef>` (so every erasure of
one subject lands on one partition, and a re-sent command gives the same event id), there is
no run state before or after, and the fact names the subject only by its reference (a keyed
digest), never by its id. Tombstoning the subject's data keys follows the fact
(`runfacts erase subject`); the decider holds no keys and decrypts nothing.
"""

from __future__ import annotations

import re

from runfacts.processors.decider.context import Draft, Rejected, draft
from runfacts.processors.decider.state import RunState
from runfacts.schemas import commands as cmd
from runfacts.schemas import events as ev

ERASURE_RUN_PREFIX = "erasure-"
SUBJECT_REF = re.compile(r"[a-z2-7]{26}")  # runfacts.privacy.envelope.REF_PATTERN


def erasure_run_id(subject_ref: str) -> str:
    """The run id an erasure of `subject_ref` travels under."""
    return ERASURE_RUN_PREFIX + subject_ref


def erase_subject(c: cmd.EraseSubject, state: RunState | None) -> list[Draft]:
    """One `subject.erased` fact, or a rejection naming what is wrong."""
    p = c.payload
    if state is not None:
        raise Rejected(c, "run_exists", "an erasure is not a command on a run")
    if not SUBJECT_REF.fullmatch(p.subjectRef):
        raise Rejected(c, "invalid_subject_ref", "expected 26 characters of base32 (runfacts.privacy.subject_ref)")
    if c.runId != erasure_run_id(p.subjectRef):
        raise Rejected(c, "invalid_erasure_run", f"runId must be {erasure_run_id(p.subjectRef)}")
    return [draft(ev.SubjectErased, subjectRef=p.subjectRef, requestRef=p.requestRef, actor=c.actor)]
