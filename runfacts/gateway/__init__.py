"""`runfacts.gateway`: runfacts over HTTP — a shell over `runfacts.client`, no rules inside.

    runfacts gateway serve --port 8090        # RUNFACTS_GATEWAY_KEYS[_FILE], RUNFACTS_SOURCE_KEYS[_FILE]

Start a run, record reasoning, propose a call, decide an approval, stop or cancel, read a run's
state and view (waiting for `min_version`), list pending approvals, and stream a run's facts
and view as Server-Sent Events that resume after `Last-Event-ID` (a Kafka position). Every
write is a command the run decider validates, signed server-side for the API key's source;
the actor is the key's, never the body's. docs/http.md shows every call with curl.

Pure: `models` (the HTTP contract, pydantic), `openapi` (the operations table and the OpenAPI
3.1 document), `problems` (RFC 9457 documents), `limits` (token buckets, idempotency records).
Loader: `keys` (API keys -> actors: parsing and lookup, and `load_api_keys` from the environment).
Shells: `service` (the
commands and reads through runfacts.client), `streams` (SSE over a read_committed consumer),
`app` (the starlette app: auth, limits, idempotency, handlers). Like the dashboard, this room
uses starlette; nothing below it does.
"""

from runfacts.gateway.app import Gateway, GatewaySettings, create_app
from runfacts.gateway.keys import ApiKey, ApiKeys, load_api_keys, parse_api_keys
from runfacts.gateway.openapi import OPERATIONS, document
from runfacts.gateway.problems import ProblemError
from runfacts.gateway.service import Service, ServiceSettings
from runfacts.gateway.streams import RunStream, StreamSettings

__all__ = ["OPERATIONS", "ApiKey", "ApiKeys", "Gateway", "GatewaySettings", "ProblemError", "RunStream", "Service",
           "ServiceSettings", "StreamSettings", "create_app", "document", "load_api_keys", "parse_api_keys"]
