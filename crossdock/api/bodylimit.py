"""A request body is read whole before the app sees it, but never past the config's
``limits.max_request_bytes``: a longer one (by its Content-Length, or as it arrives) is answered
413 with one line naming the limit and its key, and the rest is not read."""

from __future__ import annotations

from typing import Any, Callable

from fastapi.responses import JSONResponse

from crossdock.queue.bounds import request_too_large
from crossdock.queue.config_limits import Limits


class BodyLimit:
    """ASGI middleware; ``limits()`` is read per request (a live config change applies at once)."""

    def __init__(self, app: Any, limits: Callable[[], Limits]):
        self.app, self.limits = app, limits

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limits = self.limits()
        limit = limits.max_request_bytes
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._refuse(scope, receive, send, limits)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                chunks.clear()
                await self._refuse(scope, receive, send, limits)
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: a disconnect, for streaming answers

        await self.app(scope, replay, send)

    @staticmethod
    async def _refuse(scope: dict, receive: Any, send: Any, limits: Limits) -> None:
        answer = JSONResponse({"error": "RequestTooLarge", "problems": [request_too_large("request body", limits)]},
                              status_code=413, headers={"Connection": "close"})
        await answer(scope, receive, send)
