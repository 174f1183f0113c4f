"""`create_app(deps)`: the FastAPI application. It does no I/O at startup; `deps` are injected."""

from __future__ import annotations

from fastapi import FastAPI

import memstream
from memstream.api.deps import ApiDeps
from memstream.api.docs import install_docs
from memstream.api.errors import install_error_handlers
from memstream.api.fast_routes import FastRoutes
from memstream.api.forwarding import Forwarder, Forwarding
from memstream.api.request_guard import RequestGuard
from memstream.api.request_metrics import RequestMetrics
from memstream.api.routes.agents import agents_router
from memstream.api.routes.context import context_router
from memstream.api.routes.health import health_router
from memstream.api.routes.memory import memory_router
from memstream.api.routes.messages import messages_router
from memstream.api.routes.threads import threads_router
from memstream.api.routes.users import users_router
from memstream.api.security import ApiKeyBearer
from memstream.console import install_console

DESCRIPTION = """
Memory for AI agents. Append every message of every thread; get each turn's context back.

**Authentication**: every `/v1` call needs `Authorization: Bearer msk_...`. A key belongs to one
account; everything you read or write is scoped to that account (and the server's environment).
Thread ids are yours: two accounts using the same id have two separate threads.

**Errors** always look like `{"error": {"code": "...", "message": "...", "field": "..."}}`
(`field` when one input field is at fault). Invalid input writes nothing. Ids (thread, agent,
user, message, tool call) are 1-128 of A-Z a-z 0-9 . _ : @ - and nothing else (no line breaks).
Text must be valid Unicode without NUL (U+0000): 422 `invalid_text`; a body must be UTF-8 JSON
(422 `invalid_encoding`) nested at most 64 levels (422 `json_too_deep`). A key is only accepted
in the `Authorization` header: a credential in the URL is 400 `api_key_in_query`, two
`Authorization` headers are 400 `duplicate_authorization`.

**Durability**: an append answers 201 only after the messages are durable. Give every message a
`message_id` and retry on 503 or network errors: a retry returns the same stored messages.

**Agent memory**: bind `memory` to an agent (`PUT /v1/agents/{agent_id}`), offer the model the
tools of `GET /v1/agents/{agent_id}/tools`, and run its tool calls with
`POST /v1/agents/{agent_id}/tools/{tool_name}`. Pinned facts (user_profile entries of importance
0.7 or more) open every context. `user_id` always says which user you act for: private entries are
visible only to their user.

**Journal tools**: every agent is also offered `journal_message_search` (search its earlier
conversations' user and assistant messages, with one summary per matching thread) and
`journal_tool_call_view` (read an earlier tool call's full result or arguments in pages of up to
32 KB), whether or not `memory` is bound. They only ever see the agent's own threads, and only the
user's threads when the call acts for a user. Keys issued to an MCP gateway
(`memstream keys create --surface mcp`) are never offered them.
"""

TAGS = [
    {"name": "threads", "description": "Threads, their owner (agent, user) and metadata."},
    {"name": "messages", "description": "The durable journal of a thread's messages."},
    {"name": "context", "description": "What the model sees at the start of a turn."},
    {"name": "agents", "description": "Agents' capability bindings and the tools they offer."},
    {"name": "memory", "description": "Browse, edit and export an agent's memory entries."},
    {"name": "users", "description": "Erasing a user of the account everywhere."},
    {"name": "health", "description": "Probes for orchestrators."},
]


def create_app(deps: ApiDeps, *, fast_routes: bool = True, forwarding: Forwarding | None = None) -> FastAPI:
    """The API over `deps` (whose owner opens and closes them; see `memstream.api.deps`).
    `fast_routes=False` leaves out `FastRoutes` (appends and contexts answered by FastAPI's own
    machinery, as every other route; the answers are the same). `forwarding`: requests another
    node serves are sent there (`memstream.api.forwarding`; its owner closes it)."""
    app = FastAPI(
        title="memstream",
        version=memstream.__version__,
        description=DESCRIPTION,
        openapi_tags=TAGS,
        docs_url=None,  # served offline by `install_docs`
        redoc_url=None,
        # FastAPI's native OpenTelemetry asks the global tracer, meter and logger providers on every
        # request whether anyone listens (~4% of the node's CPU under load); memstream configures
        # no OpenTelemetry, so nobody does.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.deps = deps
    if fast_routes:
        app.add_middleware(FastRoutes, api=app)  # inside RequestGuard (added after it, so outside)
    if forwarding is not None:  # between the guard and FastRoutes
        app.add_middleware(Forwarder, forwarding=forwarding, authenticate=ApiKeyBearer(deps))
    app.add_middleware(RequestGuard)
    app.add_middleware(RequestMetrics)  # outermost: times everything the guard and routes do
    install_error_handlers(app)
    install_docs(app)
    install_console(app)
    # Routes are matched in order, each at a cost: the hot ones (appends, contexts) first. No two
    # routers have a path in common, so the order decides nothing else (the docs group by tag).
    app.include_router(messages_router(deps))
    app.include_router(context_router(deps))
    app.include_router(threads_router(deps))
    app.include_router(health_router(deps))
    if deps.erasures is not None:
        app.include_router(users_router(deps))
    if deps.memory is not None or deps.transcripts is not None:
        app.include_router(agents_router(deps, deps.memory))
    if deps.memory is not None:
        app.include_router(memory_router(deps, deps.memory))
    if fast_routes:
        FastRoutes(app.router, api=app)  # a hot route that changed shape fails here, not per request
    return app
