"""The ``guide`` toolset: the knowledge-engine seed's ``initiate_session`` and
``navigate_session``, walking the decision trees of ``LDIMS_GUIDE_DIR`` with the session
state in Redis (:mod:`ldims.guide`).

Field names are the seed's (``SessionState``: ``session_id``, ``response``, ``current_step``,
``options[]`` {``id``, ``description``}, ``is_complete``); LDIMS adds ``tree_id``,
``node_id``, ``documents`` (snippets a node links to, from the caller's own documents) and
``notice``. Errors are ``isError`` results: ``INVALID_OPTION`` (with ``validOptions``),
``SESSION_NOT_FOUND`` (also for another tenant's session), ``SESSION_EXPIRED``,
``SESSION_COMPLETE``, ``INVALID_INPUT``, ``GUIDE_UNAVAILABLE``.

(No ``from __future__ import annotations``: the SDK reads the tools' annotations.)
"""

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from api.mcp.server import LdimsMCP
from api.mcp.toolset import Toolset
from ldims.caller import Caller
from ldims.guide import SHIPPED_TREES, GuideEngine, SessionStore, TreeStore
from ldims.guide.errors import (
    GuideUnavailable,
    InvalidOption,
    SessionComplete,
    SessionExpired,
    SessionNotFound,
)
from ldims.guide.trees import DocumentLink
from ldims.services import Services

INITIATE_DESCRIPTION = (
    "Start a guided consultation from the user's question. The server walks a knowledge "
    "(decision) tree: show the user `response`, then the `options` (their `description`s); "
    "map the user's reply to an option `id` and call navigate_session. Keep the session_id. "
    "When is_complete is true the consultation is over. Questions in Chinese, Russian and "
    "English are understood."
)
NAVIGATE_DESCRIPTION = (
    "Take the next step of a guided consultation: pass the session_id and the id of the "
    "option the user chose. Besides the listed options, `back` (previous step), `end` "
    "(finish) and `provide_more_info` (with the user's own words in user_input, when the "
    "reply matches no option) always work. Returns the same state as initiate_session."
)


class SessionOption(BaseModel):
    id: str = Field(description="Pass this as selected_option_id")
    description: str = Field(description="What to show the user")


class SessionState(BaseModel):
    """The seed's SessionState, plus where the session stands."""

    session_id: str = Field(description="The session's handle; pass it to navigate_session")
    response: str = Field(description="What to tell the user at this step")
    current_step: str = Field(description="The step's name")
    options: list[SessionOption] = Field(description="What the user can choose next")
    is_complete: bool = Field(description="True when the consultation has ended")
    tree_id: str = Field(description="The knowledge tree being walked")
    node_id: str | None = Field(description="The tree node of this step")
    documents: list[dict[str, Any]] = Field(
        default_factory=list, description="Documents this step links to, with snippets"
    )
    notice: str | None = Field(
        default=None, description="Something the server did that the user should hear"
    )


def register(server: LdimsMCP) -> None:
    """Add the guide toolset to ``server``."""
    settings = server.services.settings
    trees = TreeStore(settings.guide_dir or SHIPPED_TREES)
    sessions = SessionStore.from_url(
        settings.effective_redis_url,
        settings.guide_session_ttl_seconds,
        prefix=settings.redis_key_prefix,
        max_per_tenant=settings.guide_max_sessions_per_tenant,
    )
    server.on_close(sessions.client.close)

    documents = server.services.documents

    def find_documents(caller: Caller, link: DocumentLink) -> list[dict[str, Any]]:
        return documents.linked(caller, link.query, list(link.ids), link.limit)

    engine = GuideEngine(trees, sessions, settings.guide_match_threshold, find_documents)

    @server.tool(
        name="initiate_session",
        description=INITIATE_DESCRIPTION,
        annotations=ToolAnnotations(read_only_hint=False, open_world_hint=False),
    )
    async def initiate_session(
        user_query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=2000,
                description="The user's original question, in their words",
            ),
        ],
        ctx: Context,
    ) -> SessionState:
        state = await server.blocking(engine.initiate, server.caller(ctx), user_query)
        return SessionState.model_validate(state)

    @server.tool(
        name="navigate_session",
        description=NAVIGATE_DESCRIPTION,
        annotations=ToolAnnotations(read_only_hint=False, open_world_hint=False),
    )
    async def navigate_session(
        session_id: Annotated[
            str, Field(min_length=1, max_length=200, description="From initiate_session")
        ],
        selected_option_id: Annotated[
            str,
            Field(
                min_length=1,
                max_length=200,
                description="An option id of the last step, or back / end / provide_more_info",
            ),
        ],
        ctx: Context,
        user_input: Annotated[
            str | None,
            Field(max_length=2000, description="The user's own words (provide_more_info)"),
        ] = None,
    ) -> SessionState:
        state = await server.blocking(
            engine.navigate, server.caller(ctx), session_id, selected_option_id, user_input
        )
        return SessionState.model_validate(state)


def _instructions(services: Services, caller: Caller) -> str:
    return (
        "For a guided consultation (troubleshooting, a decision to walk through step by step), "
        "call initiate_session with the user's question, show the user each step's response "
        "and options, and pass the chosen option id to navigate_session until is_complete."
    )


TOOLSET = Toolset(
    name="guide",
    register=register,
    errors=(SessionNotFound, SessionExpired, SessionComplete, InvalidOption, GuideUnavailable),
    rpc_codes={
        "SESSION_NOT_FOUND": -32002,
        "SESSION_EXPIRED": -32002,
        "SESSION_COMPLETE": -32602,
        "INVALID_OPTION": -32602,
        "GUIDE_UNAVAILABLE": -32603,
    },
    instructions=_instructions,
    scope="guide",
)
