"""`runfacts erase`: the right to erasure (crypto-shredding, docs/security.md, ADR 0009).

- `erase subject --subject ID --request REF`: the operator's erasure of one data subject.
  1. the subject's reference (keyed digest) is computed with the privacy keys;
  2. unless the log already holds its `subject.erased` fact (an earlier run stopped after it),
     `subject.erase` goes through the run decider (operator role; a rejection exits 3), which
     records `subject.erased` (the reference and the request, never the id);
  3. then each of the subject's data keys is tombstoned in `<prefix>.keys`.
  Interrupted between 2 and 3 (crash point `erase.after_fact_before_tombstones`), running it
  again finds the fact, sends nothing and finishes 3.
- `erase status`: recorded erasures whose subject still has live keys (exit 1 when any).
- `erase resume`: finishes them all (tombstones; the facts are already on the log).
- `erase keygen`: a fresh privacy keys JSON (for RUNFACTS_PII_KEYS_FILE, mode 600).
- `erase rewrap`: rewrap every data key under the current KEK (after adding a new one).
Exit codes: 0 done, 1 configuration or broker error (or `status` found unfinished erasures),
3 the decider rejected the erasure.
"""

from __future__ import annotations

import typer
from rich.console import Console

from runfacts.cli.ops import _identity, _issue, _send, _setup
from runfacts.crashpoints import crash_point
from runfacts.ops.control import Issue
from runfacts.ops.erasure import pending, recorded
from runfacts.privacy.envelope import subject_ref
from runfacts.privacy.keys import load_privacy_keys, new_privacy_keys_json
from runfacts.privacy.store import KeyStore
from runfacts.processors.decider.commands.run import erasure_run_id
from runfacts.schemas import commands as cmd

app = typer.Typer(no_args_is_help=True, help="Erase a data subject's personal fields (crypto-shredding).")


def erase_command(ref: str, request_ref: str, issue: Issue) -> cmd.EraseSubject:
    """The `subject.erase` command for subject reference `ref`."""
    return cmd.EraseSubject(commandId=issue.command_id, runId=erasure_run_id(ref), actor=issue.actor,
                            issuedAt=issue.issued_at, correlationId=f"erase:{request_ref}",
                            payload=cmd.EraseSubjectPayload(subjectRef=ref, requestRef=request_ref))


@app.command("subject")
def subject(subject_id: str = typer.Option(..., "--subject", help="The data subject's id (a userId or subjectId)."),
            request_ref: str = typer.Option(..., "--request", help="The erasure request's reference (no personal "
                                            "data), kept in the fact."),
            timeout: float = typer.Option(30.0, "--timeout", help="Seconds to wait for the run decider.")) -> None:
    """Erase one data subject: an audited `subject.erased` fact, then its keys' tombstones."""
    keys = load_privacy_keys()
    ref = subject_ref(subject_id, keys)
    kafka, names, _settings = _setup(timeout)
    found = recorded(kafka, names, ref, timeout)
    if found is None:
        _send(erase_command(ref, request_ref, _issue(_identity())), timeout)
    else:
        Console().print(f"subject {ref}: erasure already recorded ({names.events} offset {found.offset}, "
                        f"request {found.request}); finishing its tombstones")
    crash_point("erase.after_fact_before_tombstones")
    erased = KeyStore(kafka, names.keys, keys).erase(ref)
    Console().print(f"subject {ref}: {len(erased)} data key(s) tombstoned in {names.keys}; "
                    "its sealed fields now read [erased]")


@app.command("status")
def status() -> None:
    """List recorded erasures (`subject.erased` facts) whose subject still has live keys; exit 1 if any."""
    kafka, names, _settings = _setup()
    unfinished = pending(kafka, names, KeyStore(kafka, names.keys, load_privacy_keys()))
    for e in unfinished:
        Console().print(f"subject {e.ref}: erasure recorded ({names.events} offset {e.offset}, request "
                        f"{e.request}) but {e.live_keys} data key(s) live in {names.keys}: run `runfacts erase resume`")
    if unfinished:
        raise typer.Exit(1)
    Console().print(f"every recorded erasure is finished (no live keys of an erased subject in {names.keys})")


@app.command("resume")
def resume() -> None:
    """Finish every recorded erasure whose keys are still live (tombstone them)."""
    kafka, names, _settings = _setup()
    store = KeyStore(kafka, names.keys, load_privacy_keys())
    unfinished = pending(kafka, names, store)
    for e in unfinished:
        erased = store.erase(e.ref)
        Console().print(f"subject {e.ref}: {len(erased)} data key(s) tombstoned in {names.keys} "
                        f"(request {e.request})")
    Console().print(f"{len(unfinished)} unfinished erasure(s) finished")


@app.command("keygen")
def keygen(kid: str = typer.Option("kek-1", "--kid", help="Id of the key-encryption key.")) -> None:
    """Print a fresh privacy keys JSON (store it mode 600; point RUNFACTS_PII_KEYS_FILE at it)."""
    typer.echo(new_privacy_keys_json(kid))


@app.command("rewrap")
def rewrap() -> None:
    """Rewrap every data key under the current KEK (rotation), so an older KEK can be dropped."""
    kafka, names, _settings = _setup()
    count = KeyStore(kafka, names.keys, load_privacy_keys()).rewrap()
    Console().print(f"{count} data key(s) rewrapped in {names.keys}")
