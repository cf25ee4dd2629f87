"""``PUT/GET /admin/v2/persistent/{t}/{ns}/{topic}/offload``: offload on request, and status."""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin import TopicAdmin, position
from magnetar.broker.offload import OffloadService
from magnetar.core.ids import MessageId
from magnetar.http.bodies import json_body
from magnetar.http.routes import Route, ok
from magnetar.http.topics import T, _message_id, topic_of


def offload_routes(admin: TopicAdmin, service: OffloadService) -> list[Route]:
    async def trigger(request: web.Request) -> web.Response:
        topic = await admin.require(topic_of(request))
        body = await json_body(request, default=None)
        at: MessageId = _message_id(body, request.query.get("messageId"))
        before = topic.end_offset if at.is_latest else admin.offset_for(topic, at)
        count = service.request(topic, before)
        return web.json_response({"segments": count}, status=202)

    async def status(request: web.Request) -> web.Response:
        topic = await admin.require(topic_of(request))
        st = service.status_of(topic)
        local = [s for s in topic.segments() if s.local and s.state.value != "OFFLOADED"]
        first = local[0].first_offset if local else topic.end_offset
        return ok(
            {
                "status": st.status,
                "lastError": st.last_error,
                "segmentsOffloaded": st.offloaded,
                # Magnetar's own, for progress: due and not offloaded yet; done since start
                "segmentsQueued": len(st.queued),
                "bytesQueued": sum(s.size for s in st.queued.values()),
                "bytesOffloaded": st.offloaded_bytes,
                "firstUnoffloadedMessage": position(topic, first),
            }
        )

    return [
        Route(
            "PUT",
            T + "/offload",
            trigger,
            "Offload closed segments before a message id",
            "MessageId",
        ),
        Route("GET", T + "/offload", status, "Offload status"),
    ]
