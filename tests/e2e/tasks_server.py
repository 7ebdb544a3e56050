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
