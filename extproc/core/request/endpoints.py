"""The endpoint table: request path → endpoint → body parser → usage shape.

Every budgeted endpoint is one row of :data:`ENDPOINTS`; the request side reads the body with the
row's parser, the response side reads ``usage`` in the row's usage shape. Adding an endpoint is
adding a row (a parser returning :class:`~extproc.core.request.request_body.RequestFeatures`, and the usage
shape its server reports: :mod:`extproc.core.response.api_usage`), nothing else switches on it.

======================================  =============  ====================================  ===========
path                                    endpoint       body parser                           usage shape
======================================  =============  ====================================  ===========
``/v1/chat/completions``                ``chat``       :func:`request_body.features_of`      ``openai``
``/v1/completions``                     ``completions`` :func:`request_body.features_of`     ``openai``
``/v1/responses``                       ``responses``  :func:`api_bodies.responses_features`  ``responses``
``/v1/messages``                        ``messages``   :func:`api_bodies.messages_features`   ``anthropic``
``/v1/chat/completions/batch``          ``chat_batch`` :func:`api_bodies.chat_batch_features` ``openai``
======================================  =============  ====================================  ===========

Only ``POST`` is budgeted; any other path or method is routed to the largest pool as
``unsupported_path``. A Responses API answer is always read (its ``id`` → pool entry serves a later
``previous_response_id``: :mod:`extproc.core.route.response_ids`); a chat batch's usage is the sum over its
conversations (learned against the summed estimate, never judged for truncation).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from extproc.core.request.api_bodies import chat_batch_features, messages_features, responses_features
from extproc.core.request.chat_messages import UnreadableRequest
from extproc.core.request.request_body import RequestFeatures, features_of, load_object

__all__ = [
    "ENDPOINTS",
    "Endpoint",
    "EndpointSpec",
    "UsageShape",
    "endpoint_for_path",
    "parse_body",
    "spec_for_path",
    "spec_of",
]

UsageShape = Literal["openai", "responses", "anthropic"]
"""How an API reports usage (:mod:`extproc.core.response.api_usage`, :mod:`extproc.core.response.sse`)."""


class Endpoint(enum.StrEnum):
    """A budgeted endpoint; its value is the label used in metrics, payloads and records."""

    CHAT = "chat"
    COMPLETIONS = "completions"
    RESPONSES = "responses"
    MESSAGES = "messages"
    CHAT_BATCH = "chat_batch"


BodyParser = Callable[[dict[str, Any]], RequestFeatures]
"""``(loaded JSON object) -> features``; raises :class:`UnreadableRequest`."""


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    """One row of the endpoint table.

    Attributes:
        endpoint: the endpoint.
        path: its request path (query string and a trailing slash are ignored when matching).
        parse: the body parser.
        usage_shape: how its server reports usage in a response.
        always_read: its answer is read whatever the sampling says (Responses API ids).
        sums_conversations: its usage sums several sequences' prompts (the chat batch): learned
            against the summed estimate, never judged for truncation.
    """

    endpoint: Endpoint
    path: str
    parse: BodyParser
    usage_shape: UsageShape
    always_read: bool = False
    sums_conversations: bool = False


_CHAT: str = Endpoint.CHAT.value
_COMPLETIONS: str = Endpoint.COMPLETIONS.value


def _chat(parsed: dict[str, Any]) -> RequestFeatures:
    return features_of(parsed, _CHAT)


def _completions(parsed: dict[str, Any]) -> RequestFeatures:
    return features_of(parsed, _COMPLETIONS)


ENDPOINTS: tuple[EndpointSpec, ...] = (
    EndpointSpec(Endpoint.CHAT, "/v1/chat/completions", _chat, "openai"),
    EndpointSpec(Endpoint.COMPLETIONS, "/v1/completions", _completions, "openai"),
    EndpointSpec(Endpoint.RESPONSES, "/v1/responses", responses_features, "responses", always_read=True),
    EndpointSpec(Endpoint.MESSAGES, "/v1/messages", messages_features, "anthropic"),
    EndpointSpec(
        Endpoint.CHAT_BATCH,
        "/v1/chat/completions/batch",
        chat_batch_features,
        "openai",
        sums_conversations=True,
    ),
)
"""The budgeted endpoints (module docstring)."""

_BY_PATH: dict[str, EndpointSpec] = {s.path: s for s in ENDPOINTS}
_BY_ENDPOINT: dict[str, EndpointSpec] = {s.endpoint.value: s for s in ENDPOINTS}


def spec_for_path(path: str) -> EndpointSpec | None:
    """The row of a request ``:path`` (query string ignored, a trailing slash tolerated); None when
    the path is not budgeted."""
    return _BY_PATH.get(path.split("?", 1)[0].rstrip("/"))


def endpoint_for_path(path: str) -> Endpoint | None:
    """The endpoint of a request ``:path`` (:func:`spec_for_path`), None for anything else."""
    spec = spec_for_path(path)
    return spec.endpoint if spec is not None else None


def spec_of(endpoint: str) -> EndpointSpec | None:
    """The row of an endpoint label (e.g. ``"chat"``, as carried by an off-path payload); None when
    the label is not an endpoint."""
    return _BY_ENDPOINT.get(endpoint)


def parse_body(body: bytes, endpoint: str | EndpointSpec) -> RequestFeatures:
    """Parse the body of any budgeted endpoint with its row's parser.

    Args:
        body: the raw request body (UTF-8 JSON).
        endpoint: the endpoint's row, or its label (``"chat"``, …).

    Raises:
        UnreadableRequest: the body cannot be budgeted (``reason`` is a bounded label; ``model``
            is set when the body was a JSON object with a ``model``).
    """
    spec = endpoint if isinstance(endpoint, EndpointSpec) else _BY_ENDPOINT.get(endpoint)
    parsed = load_object(body)
    try:
        if spec is None:
            raise UnreadableRequest("unsupported_path")
        return spec.parse(parsed)
    except UnreadableRequest as exc:
        exc.model = parsed.get("model") or None
        raise
