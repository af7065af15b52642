"""`runfacts gateway serve`: runfacts over HTTP (runfacts.gateway) on uvicorn."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import typer
from pydantic_settings import BaseSettings, SettingsConfigDict

from runfacts import telemetry
from runfacts.client import ClientSettings, Runfacts
from runfacts.gateway import (
    Gateway,
    GatewaySettings,
    Service,
    ServiceSettings,
    StreamSettings,
    create_app,
    load_api_keys,
)
from runfacts.processors.engine.gctune import limit_arenas
from runfacts.processors.policy.access import load_policy
from runfacts.processors.policy.keyring import load_source_keys_if_configured
from runfacts.processors.policy.sources import require_signing_key
from runfacts.schemas.errors import ConfigError
from runfacts.settings import KafkaSettings

app = typer.Typer(help="runfacts over HTTP: runs, proposals, approvals, resumable streams.", no_args_is_help=True)


class GatewayEnv(BaseSettings):
    """Gateway settings (environment prefix RUNFACTS_GATEWAY_)."""

    model_config = SettingsConfigDict(env_prefix="RUNFACTS_GATEWAY_", frozen=True, extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8090
    args_store: str = ""  # the dispatcher's --args-store (default $RUNFACTS_ARGS_STORE)
    max_body_bytes: int = 64 * 1024
    rate_per_s: float = 50.0
    burst: float = 100.0
    answer_timeout_s: float = 30.0
    stream_queue_max: int = 1_000
    policy_file: Path | None = None  # the decider's access policy (default: the packaged one)
    http: str = "auto"  # uvicorn's HTTP parser: auto (httptools when installed, else h11), httptools, h11
    malloc_arenas: int = 2  # glibc malloc arenas at most (0: glibc's default, 8 per core): docs/http.md, "Sizing"


HTTP_PARSERS = {"auto": None, "h11": "h11", "httptools": "httptools"}
"""RUNFACTS_GATEWAY_HTTP -> the module it needs (auto: httptools when installed, else h11)."""


def http_parser(name: str) -> str:
    """`name` checked before uvicorn sees it (it took any text as an import path and failed with a
    traceback): a ConfigError naming the choices, or the missing module and how to install it."""
    if name not in HTTP_PARSERS:
        raise ConfigError("RUNFACTS_GATEWAY_HTTP", name, f"expected one of {', '.join(HTTP_PARSERS)}")
    module = HTTP_PARSERS[name]
    if module is not None and importlib.util.find_spec(module) is None:
        raise ConfigError("RUNFACTS_GATEWAY_HTTP", name, f"the {module} module is not installed: "
                          f"pip install {module}, or use auto")
    return name


def build(env: GatewayEnv, kafka: KafkaSettings) -> Gateway:
    """The gateway's parts: keys, the client (signing for every key's source), the policy."""
    keys = load_api_keys()
    sources = load_source_keys_if_configured()
    if sources is None:
        raise ConfigError("RUNFACTS_SOURCE_KEYS", None, "the gateway signs every command for its key's source: "
                                                        "set RUNFACTS_SOURCE_KEYS_FILE or RUNFACTS_SOURCE_KEYS")
    for source in sorted(keys.sources):
        require_signing_key(sources, source)  # fails at start, naming the source, not at the first request
    rf = Runfacts.connect(kafka=kafka, args_store=env.args_store or None, sources=sources,
                          settings=ClientSettings(component="gateway"))
    return Gateway(keys, Service(rf, load_policy(env.policy_file), ServiceSettings(env.answer_timeout_s)),
                   GatewaySettings(max_body_bytes=env.max_body_bytes, rate_per_s=env.rate_per_s, burst=env.burst,
                                   streams=StreamSettings(queue_max=env.stream_queue_max)))


@app.command("serve")
def serve(host: str = typer.Option(None, "--host", help="Interface (default RUNFACTS_GATEWAY_HOST or 127.0.0.1)."),
          port: int = typer.Option(None, "--port", help="Port (default RUNFACTS_GATEWAY_PORT or 8090).")) -> None:
    """Serve the HTTP gateway: API keys from RUNFACTS_GATEWAY_KEYS[_FILE], commands signed with
    RUNFACTS_SOURCE_KEYS[_FILE], approvals with RUNFACTS_APPROVAL_KEYS[_FILE]."""
    import uvicorn

    env = GatewayEnv()
    http_parser(env.http)
    limit_arenas(env.malloc_arenas)  # before any thread starts: a thread keeps the arena it got
    telemetry.configure_from_env("runfacts-gateway")
    gateway = build(env, KafkaSettings())
    typer.echo(f"gateway on http://{host or env.host}:{port or env.port} (OpenAPI at /openapi.json)", err=True)
    try:
        uvicorn.run(create_app(gateway), host=host or env.host, port=port or env.port, log_level="warning",
                    timeout_graceful_shutdown=2, http=env.http)
    finally:
        gateway.service.rf.close()
