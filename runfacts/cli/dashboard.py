"""`runfacts dashboard serve`: the live dashboard on uvicorn."""

from __future__ import annotations

import secrets
from datetime import timedelta
from pathlib import Path

import typer
from pydantic_settings import BaseSettings, SettingsConfigDict

from runfacts import telemetry
from runfacts.dashboard.app import Dashboard, create_app
from runfacts.dashboard.feed import FactsFeed, FeedSettings, StateFeed, ViewFeed, decode_view
from runfacts.dashboard.guard import LoginThrottle, ThrottleSettings, UsersFile, cookie_secure_for
from runfacts.dashboard.health import MetricsFeed, consumer_lag, processors
from runfacts.dashboard.letters import DeadLetters
from runfacts.dashboard.session import SessionSigner
from runfacts.ops.client import CommandClient, ReaderSettings
from runfacts.privacy.store import key_view_if_configured, protector_if_configured
from runfacts.processors.policy.access import load_policy
from runfacts.processors.policy.keyring import load_source_keys_if_configured
from runfacts.security.identity import users_file
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
    cookie_secure: bool | None = None  # default: on, unless bound to loopback (plain http there)
    login_max_failures: int = 5  # failed sign-ins per user name within login_window_s ...
    login_max_failures_per_address: int = 20  # ... and per client address
    login_window_s: int = 900
    outcome_timeout_s: float = 30.0
    stuck_after_s: float = 600.0
    policy_file: Path | None = None  # the decider's access policy (default: the packaged one)


def build_dashboard(settings: DashboardSettings, kafka: KafkaSettings, host: str | None = None) -> Dashboard:
    """The dashboard's parts from settings: feeds over the user-view and run-state topics, the
    users file (re-read when it changes), signer, client; `host` (default settings.host) decides
    the default of cookie_secure."""
    names = TopicNames(kafka.topic_prefix)
    secret = settings.session_secret.encode() or secrets.token_bytes(32)
    group = group_prefix(names.prefix, "dashboard")  # what the dashboard principal's ACLs grant
    views = ViewFeed(kafka, FeedSettings(names.user_view, decode_view, group_prefix=group))
    states = StateFeed(kafka, FeedSettings(names.state, stuck_after=timedelta(seconds=settings.stuck_after_s),
                                          group_prefix=group))
    throttle = ThrottleSettings(settings.login_max_failures, settings.login_max_failures_per_address,
                                settings.login_window_s)
    facts = FactsFeed(kafka, FeedSettings(names.events, group_prefix=group))
    return Dashboard(views=views, states=states, users=UsersFile(users_file()), facts=facts,
                     dead_letters=DeadLetters(kafka, names, group),
                     lag=lambda: consumer_lag(kafka, processors(names)),
                     audit=FactsFeed(kafka, FeedSettings(names.audit, group_prefix=group)),
                     metrics=MetricsFeed(kafka, FeedSettings(names.metrics, group_prefix=group)),
                     signer=SessionSigner(secret, settings.session_ttl_s),
                     commands=CommandClient(kafka, names, settings=ReaderSettings(
                         outcome_timeout_s=settings.outcome_timeout_s, component="dashboard"),
                         sources=load_source_keys_if_configured(),  # signs as authSource "dashboard"
                         protect=protector_if_configured(kafka, names.keys)),  # seals personal fields
                     keys=key_view_if_configured(kafka, names.keys),
                     cookie_secure=cookie_secure_for(settings.cookie_secure, host or settings.host),
                     policy=load_policy(settings.policy_file), throttle=LoginThrottle(throttle))


@app.command("serve")
def serve(host: str = typer.Option(None, "--host", help="Interface (default RUNFACTS_DASHBOARD_HOST or 127.0.0.1)."),
          port: int = typer.Option(None, "--port", help="Port (default RUNFACTS_DASHBOARD_PORT or 8080).")) -> None:
    """Serve the dashboard: login from the users file (RUNFACTS_USERS_FILE), live runs over SSE."""
    import uvicorn

    settings = DashboardSettings()
    telemetry.configure_from_env("runfacts-dashboard")
    dashboard = build_dashboard(settings, KafkaSettings(), host)
    typer.echo(f"dashboard on http://{host or settings.host}:{port or settings.port} (users: {users_file()})",
               err=True)
    uvicorn.run(create_app(dashboard), host=host or settings.host, port=port or settings.port,
                log_level="warning", timeout_graceful_shutdown=2)
