"""`runfacts dashboard serve`: the live dashboard on uvicorn."""

from __future__ import annotations

import secrets
from datetime import timedelta
from pathlib import Path

import typer
from pydantic_settings import BaseSettings, SettingsConfigDict

from runfacts import telemetry
from runfacts.dashboard.app import Dashboard, create_app
from runfacts.dashboard.feed import FeedSettings, ViewFeed, decode_view
from runfacts.dashboard.session import SessionSigner
from runfacts.ops.client import CommandClient, ReaderSettings
from runfacts.processors.policy.access import load_policy
from runfacts.processors.policy.keyring import load_source_keys_if_configured
from runfacts.security.identity import load_users, users_file
from runfacts.settings import KafkaSettings
from runfacts.topics import TopicNames, group_prefix

app = typer.Typer(help="The live dashboard: runs, approval banners, Control commands.", no_args_is_help=True)


class DashboardSettings(BaseSettings):
    """Dashboard settings (environment prefix RUNFACTS_DASHBOARD_)."""

    model_config = SettingsConfigDict(env_prefix="RUNFACTS_DASHBOARD_", frozen=True, extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8080
    session_secret: str = ""  # empty: a random one per start (sessions end on restart)
    session_ttl_s: int = 8 * 3600
    cookie_secure: bool = False  # set true behind TLS
    outcome_timeout_s: float = 30.0
    stuck_after_s: float = 600.0
    policy_file: Path | None = None  # the decider's access policy (default: the packaged one)


def build_dashboard(settings: DashboardSettings, kafka: KafkaSettings) -> Dashboard:
    """The dashboard's parts from settings: feeds over the user-view and run-state topics, users,
    signer, client."""
    names = TopicNames(kafka.topic_prefix)
    secret = settings.session_secret.encode() or secrets.token_bytes(32)
    group = group_prefix(names.prefix, "dashboard")  # what the dashboard principal's ACLs grant
    views = ViewFeed(kafka, FeedSettings(names.user_view, decode_view, group_prefix=group))
    states = ViewFeed(kafka, FeedSettings(names.state, stuck_after=timedelta(seconds=settings.stuck_after_s),
                                          group_prefix=group))
    return Dashboard(views=views, states=states, users=load_users(),
                     signer=SessionSigner(secret, settings.session_ttl_s),
                     commands=CommandClient(kafka, names, settings=ReaderSettings(
                         outcome_timeout_s=settings.outcome_timeout_s, component="dashboard"),
                         sources=load_source_keys_if_configured()),  # signs as authSource "dashboard"
                     cookie_secure=settings.cookie_secure, policy=load_policy(settings.policy_file))


@app.command("serve")
def serve(host: str = typer.Option(None, "--host", help="Interface (default RUNFACTS_DASHBOARD_HOST or 127.0.0.1)."),
          port: int = typer.Option(None, "--port", help="Port (default RUNFACTS_DASHBOARD_PORT or 8080).")) -> None:
    """Serve the dashboard: login from the users file (RUNFACTS_USERS_FILE), live runs over SSE."""
    import uvicorn

    settings = DashboardSettings()
    telemetry.configure_from_env("runfacts-dashboard")
    dashboard = build_dashboard(settings, KafkaSettings())
    typer.echo(f"dashboard on http://{host or settings.host}:{port or settings.port} (users: {users_file()})",
               err=True)
    uvicorn.run(create_app(dashboard), host=host or settings.host, port=port or settings.port,
                log_level="warning", timeout_graceful_shutdown=2)
