"""`runfacts security ...`: Kafka ACLs per component, SCRAM users, approval keys, policy check."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from runfacts.schemas.errors import ConfigError
from runfacts.security.acls import (
    COMPONENTS,
    ComponentAccess,
    acl_entries,
    all_entries,
    apply_acls,
    component_access,
    create_scram_user,
)
from runfacts.security.acls import kafka_acls_command as to_kafka_acls
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames

app = typer.Typer(name="security", help="ACLs, SCRAM users, approval keys and the access policy.",
                  no_args_is_help=True)

Component = Annotated[list[str] | None, typer.Option("--component", "-c", help=f"one of {', '.join(COMPONENTS)}")]
Principal = Annotated[list[str] | None, typer.Option(help="override: COMPONENT=User:name")]
Fmt = Annotated[str, typer.Option("--format", help="table | json | kafka-acls")]


@app.command()
def acls(
    component: Component = None,
    principal: Principal = None,
    fmt: Fmt = "table",
    apply: Annotated[bool, typer.Option(help="create them on the cluster (needs an admin principal)")] = False,
) -> None:
    """Print (and with --apply create) the ACLs each component needs, from the topic spec."""
    settings = KafkaSettings()
    chosen = _accesses(settings, component or [], principal or [])
    entries = all_entries(chosen)
    if fmt == "json":
        typer.echo(json.dumps([{"component": a.component, "acls": [asdict(e) for e in acl_entries(a)]}
                               for a in chosen], indent=2))
    elif fmt == "kafka-acls":
        typer.echo("\n".join(to_kafka_acls(e) for e in entries))
    elif fmt == "table":
        _print_table(chosen)
    else:
        raise ConfigError("--format", fmt, "expected table, json or kafka-acls")
    if apply:
        count = apply_acls(settings, entries)
        Console(stderr=True).print(f"applied {count} ACLs on {settings.bootstrap_servers}")


def _accesses(settings: KafkaSettings, components: list[str], overrides: list[str]) -> list[ComponentAccess]:
    principals = {}
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep or not value.startswith("User:"):
            raise ConfigError("--principal", item, "expected COMPONENT=User:name")
        principals[name] = value
    accesses = component_access(TopicNames(settings.topic_prefix), principals)
    unknown = sorted(set(components) - set(COMPONENTS))
    if unknown:
        raise ConfigError("--component", unknown[0], f"known: {', '.join(COMPONENTS)}")
    return [a for a in accesses if not components or a.component in components]


def _print_table(accesses: list[ComponentAccess]) -> None:
    """One line per component and resource, operations joined (plain text: greppable, never truncated)."""
    rows = [("component", "principal", "resource", "pattern", "name", "operations")]
    for access in accesses:
        grouped: dict[tuple[str, str, str], list[str]] = {}
        for e in acl_entries(access):
            grouped.setdefault((e.resource_type, e.pattern_type, e.resource_name), []).append(e.operation)
        rows += [(access.component, access.principal, *key, ",".join(ops)) for key, ops in grouped.items()]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


@app.command()
def user(
    name: str,
    password_env: Annotated[str, typer.Option(help="environment variable holding the password")] = "",
) -> None:
    """Create or update a SCRAM-SHA-512 user (run with an admin principal's settings)."""
    password = os.environ.get(password_env, "") if password_env else typer.prompt(
        f"password for {name}", hide_input=True, confirmation_prompt=True)
    if not password:
        raise ConfigError("--password-env", password_env, "variable is unset or empty")
    settings = KafkaSettings()
    create_scram_user(settings, name, password)
    typer.echo(f"SCRAM-SHA-512 user {name} set on {settings.bootstrap_servers}")


@app.command()
def keygen(kid: Annotated[str, typer.Argument(help="key id, e.g. 2026-12")]) -> None:
    """Print a new approval signing key as a keyring entry (add it, make it current, keep the old one)."""
    from runfacts.processors.policy.approvals import KID_PATTERN
    from runfacts.processors.policy.keyring import new_secret

    if not KID_PATTERN.match(kid):
        raise ConfigError("kid", kid, f"must match {KID_PATTERN.pattern}")
    typer.echo(json.dumps({kid: new_secret()}))


@app.command()
def policy(path: Annotated[Path | None, typer.Argument(help="policy TOML (default: packaged)")] = None) -> None:
    """Validate a policy file against the contract and the capability manifests; print its version."""
    from runfacts.processors.policy.access import load_policy

    loaded = load_policy(path)
    typer.echo(f"policy {loaded.version} sha256:{loaded.digest} "
               f"({len(loaded.sources)} sources, {len(loaded.commands)} command rules)")
    scoped = sorted(name for name, rule in loaded.sources.items() if rule.tenant_scoped)
    services = sorted(set(loaded.sources) - set(scoped))
    typer.echo(f"tenant-scoped sources: {', '.join(scoped) or 'none'}; services (any tenant): "
               f"{', '.join(services) or 'none'}; cross-tenant roles: "
               f"{', '.join(sorted(loaded.cross_tenant_roles)) or 'none'}")
