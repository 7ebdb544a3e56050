"""The tasks extension (``io.modelcontextprotocol/tasks``, 2026-07-28) on the official SDK
server, for the e2e suite: ``python -m tests.e2e.server PORT --tasks`` (issue 30).

Built on the SDK's own extension seam (``mcp.server.extension``): ``tasks/get``,
``tasks/update`` and ``tasks/cancel`` are extension methods, and a ``tools/call``
interceptor answers two tools with a task handle (``resultType: "task"``):

* ``research(topic, polls)`` -- ``working`` for ``polls`` polls, then ``completed`` with
  the text ``"researched <topic>"``;
* ``interview()`` -- asks for a name (``input_required``, one elicitation under the key
  ``"name"``) until ``tasks/update`` answers it, then ``completed`` with ``"hello <name>"``.

Each task request must name its task in ``Mcp-Name`` (the spec's routing header): a
missing or different one is answered ``-32602``.  A client that did not declare the
extension gets ``-32021`` for both tools (the SDK's ``require_client_extension``).  Task
state is counted in polls, never in time, so a test asserts counts, not durations.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.server import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp_types._types import RequestParams

IDENTIFIER = "io.modelcontextprotocol/tasks"
STAMP = "2026-12-04T10:00:00Z"


class TaskParams(RequestParams):
    taskId: str


class UpdateParams(RequestParams):
    taskId: str
    inputResponses: dict[str, Any]


class Tasks(Extension):
    identifier = IDENTIFIER

    def __init__(self) -> None:
        self.tasks: dict[str, dict[str, Any]] = {}
        self.ids = itertools.count(1)

    def methods(self) -> list[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskParams, self.get),
            MethodBinding("tasks/update", UpdateParams, self.update),
            MethodBinding("tasks/cancel", TaskParams, self.cancel),
        ]

    async def intercept_tool_call(self, params: Any, ctx: Any, call_next: Any) -> Any:
        if params.name not in ("research", "interview"):
            return await call_next(ctx)
        require_client_extension(ctx, IDENTIFIER)
        arguments = params.arguments or {}
        task_id = f"task-{next(self.ids)}"
        self.tasks[task_id] = {
            "tool": params.name,
            "topic": str(arguments.get("topic", "")),
            "left": int(arguments.get("polls", 1)),
            "name": None,
            "status": "working",
            "polls": 0,
        }
        return {"resultType": "task", **self.view(task_id)}

    def view(self, task_id: str) -> dict[str, Any]:
        task = self.tasks[task_id]
        value: dict[str, Any] = {
            "taskId": task_id,
            "status": task["status"],
            "createdAt": STAMP,
            "lastUpdatedAt": STAMP,
            "ttlMs": 60_000,
            "pollIntervalMs": 50,
        }
        if task["status"] == "completed":
            text = (
                f"researched {task['topic']}"
                if task["tool"] == "research"
                else f"hello {task['name']}"
            )
            value["result"] = {"content": [{"type": "text", "text": text}], "isError": False}
        elif task["status"] == "input_required":
            value["inputRequests"] = {
                "name": {
                    "method": "elicitation/create",
                    "params": {
                        "mode": "form",
                        "message": "Your name?",
                        "requestedSchema": {
                            "type": "object",
                            "properties": {"name": {"type": "string"}},
                            "required": ["name"],
                        },
                    },
                }
            }
        return value

    def known(self, ctx: Any, task_id: str) -> dict[str, Any]:
        require_client_extension(ctx, IDENTIFIER)
        request = getattr(ctx, "request", None)
        routed = request.headers.get("mcp-name") if request is not None else None
        if routed != task_id:
            raise MCPError(code=-32602, message=f"Mcp-Name {routed!r} does not name the task")
        task = self.tasks.get(task_id)
        if task is None:
            raise MCPError(code=-32602, message="Failed to retrieve task: Task not found")
        return task

    async def get(self, ctx: Any, params: TaskParams) -> dict[str, Any]:
        task = self.known(ctx, params.taskId)
        task["polls"] += 1
        if task["status"] == "working":
            if task["tool"] == "interview":
                task["status"] = "completed" if task["name"] else "input_required"
            else:
                task["left"] -= 1
                if task["left"] <= 0:
                    task["status"] = "completed"
        return self.view(params.taskId)

    async def update(self, ctx: Any, params: UpdateParams) -> dict[str, Any]:
        task = self.known(ctx, params.taskId)
        answer = params.inputResponses.get("name")
        if task["status"] == "input_required" and isinstance(answer, dict):
            task["name"] = (answer.get("content") or {}).get("name")
            task["status"] = "working"
        return {}

    async def cancel(self, ctx: Any, params: TaskParams) -> dict[str, Any]:
        task = self.known(ctx, params.taskId)
        if task["status"] in ("working", "input_required"):
            task["status"] = "cancelled"
        return {}


def install(server: MCPServer) -> Tasks:
    """Add the extension to an SDK server built without it (the SDK fixes extensions at
    construction: this takes its private route, as the e2e server does for cache hints)."""

    @server.tool(description="Research a topic (runs as a task).")
    def research(topic: str, polls: int = 1) -> str:  # pragma: no cover - always a task
        return topic

    @server.tool(description="Ask for a name, then greet (runs as a task).")
    def interview() -> str:  # pragma: no cover - always a task
        return ""

    tasks = Tasks()
    server._apply_extension(tasks)
    server._install_extension_interceptor()
    return tasks


# ---------------------------------------------------------------- 2025-11-25 (SEP-1686)

LEGACY_TOOL = {
    "name": "deliberate",
    "description": "Deliberate on a topic (must run as a 2025-11-25 task).",
    "inputSchema": {
        "type": "object",
        "properties": {"topic": {"type": "string"}, "polls": {"type": "integer"}},
    },
    "execution": {"taskSupport": "required"},
}


class LegacyTasks:
    """ASGI middleware in front of the SDK (``--legacy-only --json``), for ``--tasks-2025``:
    the installed SDK has no SEP-1686 types, so the 2025-11-25 task shape is served here by
    hand.  ``initialize`` declares ``tasks.requests.tools.call``; ``tools/list`` gains the
    tool ``deliberate(topic, polls, hostile)`` with ``execution.taskSupport: "required"``;
    a ``tools/call`` of it with a ``task`` parameter is answered ``{"task": Task}``;
    ``tasks/get`` answers on an event stream (a ``notifications/tasks/status`` first) and
    moves the task per poll (``working`` for ``polls`` polls, then ``completed``), with a
    ``notifications/progress`` first (progress: the polls so far) when the call asked for
    progress;
    ``tasks/result`` gives the ``CallToolResult``; ``tasks/cancel`` cancels.  ``hostile``:
    ``"taskid"`` (a poll names another task) or ``"status"`` (a poll's status is unknown)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.tasks: dict[str, dict[str, Any]] = {}
        self.ids = itertools.count(1)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            rpc = json.loads(body)
        except ValueError:
            rpc = None
        method = rpc.get("method") if isinstance(rpc, dict) else None
        params = (rpc.get("params") or {}) if isinstance(rpc, dict) else {}
        if method in ("tasks/get", "tasks/result", "tasks/cancel"):
            await self.task_method(send, rpc["id"], method, params)
            return
        if method == "tools/call" and params.get("name") == "deliberate":
            await self.create(send, rpc["id"], params)
            return
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        if method not in ("initialize", "tools/list"):
            await self.app(scope, replay, send)
            return
        start: dict[str, Any] = {}
        out: list[bytes] = []

        async def capture(message: Any) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            else:
                out.append(message.get("body", b""))

        await self.app(scope, replay, capture)
        answer = json.loads(b"".join(out))
        result = answer.get("result")
        if isinstance(result, dict) and method == "initialize":
            result.setdefault("capabilities", {})["tasks"] = {
                "list": {},
                "cancel": {},
                "requests": {"tools": {"call": {}}},
            }
        elif isinstance(result, dict):
            result["tools"] = [*result.get("tools", []), LEGACY_TOOL]
        data = json.dumps(answer).encode()
        headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(data)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    def view(self, task_id: str) -> dict[str, Any]:
        task = self.tasks[task_id]
        return {
            "taskId": task_id,
            "status": task["status"],
            "createdAt": STAMP,
            "lastUpdatedAt": STAMP,
            "ttl": 60_000,
            "pollInterval": 50,
        }

    async def create(self, send: Any, rid: Any, params: dict[str, Any]) -> None:
        if not isinstance(params.get("task"), dict):
            # the spec: a tool that requires a task, called without one
            await _json(
                send, {"jsonrpc": "2.0", "id": rid, "error": _error(-32601, "task required")}
            )
            return
        arguments = params.get("arguments") or {}
        task_id = f"legacy-{next(self.ids)}"
        self.tasks[task_id] = {
            "status": "working",
            "topic": str(arguments.get("topic", "")),
            "left": int(arguments.get("polls", 1)),
            "hostile": arguments.get("hostile"),
            "token": (params.get("_meta") or {}).get("progressToken"),
            "polls": 0,
        }
        await _json(send, {"jsonrpc": "2.0", "id": rid, "result": {"task": self.view(task_id)}})

    async def task_method(self, send: Any, rid: Any, method: str, params: dict[str, Any]) -> None:
        task_id = params.get("taskId")
        task = self.tasks.get(task_id) if isinstance(task_id, str) else None
        if task is None:
            await _json(
                send, {"jsonrpc": "2.0", "id": rid, "error": _error(-32602, "no such task")}
            )
            return
        assert isinstance(task_id, str)
        if method == "tasks/cancel":
            if task["status"] == "working":
                task["status"] = "cancelled"
            await _json(send, {"jsonrpc": "2.0", "id": rid, "result": self.view(task_id)})
            return
        if method == "tasks/result":
            text = f"deliberated {task['topic']}"
            result = {
                "content": [{"type": "text", "text": text}],
                "isError": False,
                "_meta": {"io.modelcontextprotocol/related-task": {"taskId": task_id}},
            }
            await _json(send, {"jsonrpc": "2.0", "id": rid, "result": result})
            return
        if task["status"] == "working":
            task["left"] -= 1
            if task["left"] <= 0:
                task["status"] = "completed"
        view = self.view(task_id)
        if task["hostile"] == "taskid":
            view["taskId"] = "someone-else"
        elif task["hostile"] == "status":
            view["status"] = "sleeping"
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/tasks/status",
            "params": self.view(task_id),
        }
        events = [note, {"jsonrpc": "2.0", "id": rid, "result": view}]
        task["polls"] += 1
        if task["token"] is not None:  # the call's token, valid for the task's lifetime
            params = {"progressToken": task["token"], "progress": task["polls"]}
            events.insert(
                0, {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}
            )
        data = b"".join(
            b"event: message\ndata: " + json.dumps(e).encode() + b"\n\n" for e in events
        )
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send({"type": "http.response.body", "body": data})


def _error(code: int, message: str) -> dict[str, Any]:
    return {"code": code, "message": message}


async def _json(send: Any, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data})
