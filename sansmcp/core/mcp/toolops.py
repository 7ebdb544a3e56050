"""The tool scripts: list the tools, call a tool.

Each is a generator script like the session's (:mod:`.operations`), written on
:meth:`~.operations.Operations.request`, the request primitive (stream resumption,
re-issue, session expiry), and run by the machine under
:meth:`~.operations.Operations.recovering`.  ``tools/list`` walks the pages (bounded by
``Limits.max_tool_pages`` and ``max_tools``), keeps the valid entries and counts the
skipped ones, and hands the listing to the :class:`~.toolset.Toolset` (and its pages,
when every one may be cached, to the Client-wide cache).  ``tools/call`` sends the
``Mcp-Name`` / ``Mcp-Param-*`` headers the listing says, re-lists once on a header
mismatch, asks the embedder for input or backs off as the server says (:mod:`.rules`),
and checks a result against the tool's output schema.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Mapping
from typing import Any, Final, assert_never

from ..cache import CachedPage, scope_of, ttl_of
from ..errors import ServerAnswered
from ..limits import Limits
from ..messages import HEADER_MISMATCH, INVALID_PARAMS, METHOD_NOT_FOUND
from ..results import parse_call_result
from ..tools import SkippedTool, Tool, encode_header_value, param_headers
from . import rules
from .events import TaskReported, ToolCalled, ToolsListed
from .operations import Ask, Instruction, Operations, OpGen, Sleep
from .session import Era, Session
from .settings import ConnSettings
from .taskop import follow
from .taskwire import EXTENSION, LEGACY, augment_call, created_task
from .toolset import Toolset

__all__ = ["STALE_TOOL_CODES", "ToolOps"]

_MODERN: Final = Era.MODERN  # a module constant: Enum.MEMBER lookups are slow on 3.11

# JSON-RPC errors on tools/call that say the caller's idea of the tool is stale (the spec's
# caching page: "method not found or the parameters were invalid")
STALE_TOOL_CODES = frozenset({METHOD_NOT_FOUND, INVALID_PARAMS})


class ToolOps:
    """The tool scripts of one connection; the listing they keep is the ``toolset``'s.
    ``jitter`` returns a float in [0, 1) for the backoff (default 0.5)."""

    def __init__(
        self,
        ops: Operations,
        toolset: Toolset,
        jitter: Callable[[], float] | None,
    ) -> None:
        self.ops = ops
        self.settings: ConnSettings = ops.settings
        self.limits: Limits = ops.limits
        self.session: Session = ops.session
        self.can_answer = ops.can_answer
        self.toolset = toolset
        self.cache = toolset.cache
        self._jitter = jitter or (lambda: 0.5)

    # ------------------------------------------------------------ tools/list

    def list_tools(self, fresh: bool, now: float) -> OpGen:
        if not fresh:
            toolset = self.toolset
            hit = toolset.cached_listing(now)
            if hit is not None:  # every page fresh: no request at all
                toolset.adopt(hit)
                return ToolsListed(
                    tools=hit.tools,
                    skipped=hit.skipped,
                    skipped_count=hit.skipped_count,
                    ttl_ms=hit.ttl_ms,
                    cache_scope=hit.cache_scope,
                )
        tools, skipped, skipped_count = yield from self.list_pages()
        return ToolsListed(
            tools=tuple(tools),
            skipped=tuple(skipped),
            skipped_count=skipped_count,
            ttl_ms=self.toolset.ttl_ms,
            cache_scope=self.toolset.cache_scope,
        )

    def list_pages(
        self,
    ) -> Generator[Instruction, Any, tuple[list[Tool], list[SkippedTool], int]]:
        from ..listing import parse_page, validate_entry  # lazy: msgspec on the first listing

        limits = self.limits
        modern = self.session.era is _MODERN
        tasks = self.toolset.legacy_tasks
        tools: list[Tool] = []
        skipped: list[SkippedTool] = []
        skipped_count = 0
        max_tools = limits.max_tools
        names: set[str] = set()
        seen: set[str] = set()
        cursor: str | None = None
        index = 0
        ttl: int | None = None
        scope: str | None = None
        page = 0
        # the pages kept for the cache while every page so far is cacheable
        recording = self.cache is not None
        pages: list[tuple[str | None, CachedPage, float]] = []
        public = True
        while True:
            page += 1
            if page > limits.max_tool_pages:
                raise ServerAnswered(
                    f"the tool listing goes on past {limits.max_tool_pages} pages "
                    "(Limits.max_tool_pages)",
                    reason="max_tool_pages",
                    bound="max_tool_pages",
                    limit=limits.max_tool_pages,
                )
            params: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
            reply = yield from self.ops.request("tools/list", params, parse=parse_page)
            if cursor is not None and reply.message is not None and "error" in reply.message:
                self.toolset.invalidate()  # a cursor turned invalid: every cached page goes
            result = rules.result_of(reply.status, reply.message)
            rules.result_kind(result, allow_input=False)
            raw_tools = result.get("tools")
            if not isinstance(raw_tools, list):
                raise ServerAnswered(
                    "the tools/list result has no tools array", reason="malformed_result"
                )
            if index + len(raw_tools) > max_tools:
                raise ServerAnswered(
                    f"the tool listing has more than {max_tools:,} entries: "
                    f"{index + len(raw_tools):,} by page {page} (Limits.max_tools)",
                    reason="max_tools",
                    bound="max_tools",
                    limit=max_tools,
                )
            tools_at, skipped_at, count_at = len(tools), len(skipped), skipped_count
            max_tool_bytes = limits.max_tool_bytes
            for raw in raw_tools:
                outcome = validate_entry(
                    index, raw, modern=modern, max_tool_bytes=max_tool_bytes, tasks=tasks
                )
                if isinstance(outcome, Tool):
                    if outcome.name not in names:
                        names.add(outcome.name)
                        tools.append(outcome)
                        index += 1
                        continue
                    outcome = SkippedTool(
                        index=index, name=outcome.name, reason="duplicate tool name"
                    )
                skipped_count += 1
                if len(skipped) < limits.max_recorded_skips:
                    skipped.append(outcome)
                index += 1
            ttl, scope = rules.merge_cache(ttl, scope, result)
            sent = cursor
            cursor = rules.advance_cursor(
                result.get("nextCursor"), seen, page, limits.max_echo_bytes
            )
            if recording:
                page_ttl = ttl_of(result)
                recording = page_ttl > 0  # a page never served: the listing cannot be
            if recording:
                public = public and scope_of(result) == "public"
                cached = CachedPage(
                    tools=tuple(tools[tools_at:]),
                    skipped=tuple(skipped[skipped_at:]),
                    skipped_count=skipped_count - count_at,
                    next_cursor=cursor,
                    ttl_ms=page_ttl,
                )
                pages.append((sent, cached, reply.at))
            if cursor is None:
                break
        self.toolset.listed(tools, ttl or 0, scope, pages if recording else None, public)
        return tools, skipped, skipped_count

    # ------------------------------------------------------------ tools/call

    def prepare_call(self, name: str, now: float) -> None:
        """Before a call is sent: a call-only Conn takes its tools from a fresh cached
        listing, and a caller's unusable schema fails (``CallerError``) before any I/O."""
        toolset = self.toolset
        if toolset.cache is not None:
            toolset.adopt_cached_tools(now)
        if self.session.era is _MODERN:
            toolset.header_params(name)

    def call_tool(
        self, name: str, arguments: bytes, parsed: Mapping[str, Any], *, handle: bool = False
    ) -> OpGen:
        """``tools/call`` to its result; ``handle``: a task the server runs the call as
        is reported (:class:`TaskReported`, for a task handle), not followed."""
        limits = self.limits
        toolset = self.toolset
        toolset.output_schema(name)  # an unusable schema fails the call before it is sent
        attempts = 0
        relisted = False
        inputs: Mapping[str, Any] | None = None
        state: str | None = None
        shed = 0
        tool = toolset.tools.get(name)
        # a 2025-11-25 server that runs calls as tasks, asked to for a tool that may be one
        legacy_task = (
            self.toolset.legacy_tasks and tool is not None and tool.task_support is not None
        )
        while True:
            attempts += 1
            if attempts > limits.max_call_attempts:
                raise ServerAnswered(
                    f"the server asked for more input {limits.max_call_attempts} times "
                    "(Limits.max_call_attempts)",
                    reason="max_call_attempts",
                    bound="max_call_attempts",
                    limit=limits.max_call_attempts,
                )
            params: dict[str, Any] = {"name": name}
            if legacy_task:
                params = augment_call(LEGACY, params)
            extra: list[tuple[bytes, bytes]] = []
            modern = self.session.era is _MODERN
            if modern:
                extra.append((b"mcp-name", encode_header_value(name)))
                extra.extend(param_headers(toolset.header_params(name), parsed))
            if inputs is not None:
                params["inputResponses"] = inputs
            if state is not None:
                params["requestState"] = state
            tool = toolset.tools.get(name)
            reissue = self.settings.reissue_calls or (tool is not None and tool.idempotent)
            reply = yield from self.ops.request(
                "tools/call", params, arguments=arguments, extra=extra, reissue=reissue
            )
            message = reply.message
            if (
                modern
                and not relisted
                and message is not None
                and "error" in message
                and message["error"]["code"] == HEADER_MISMATCH
            ):
                relisted = True
                toolset.invalidate()  # the listing the headers came from is stale
                yield from self.list_pages()
                continue
            if (
                message is not None
                and "error" in message
                and message["error"]["code"] in STALE_TOOL_CODES
                and name in toolset.tools
            ):
                toolset.invalidate()
            result = rules.result_of(reply.status, reply.message)
            shape = EXTENSION if modern and self.settings.tasks else None
            task = created_task(
                result,
                LEGACY if legacy_task else shape,
                method="tools/call",
                max_echo_bytes=limits.max_echo_bytes,
            )
            if task is not None and handle:
                self.ops.report_task(task.task_id, task.status, task.status_message)
                return TaskReported(
                    task_id=task.task_id, status=task.status, status_message=task.status_message
                )
            if task is not None:  # the server runs the call as a task: poll it to its end
                result = yield from follow(self.ops, task, reply.at, shape or LEGACY)
            step = rules.next_call_step(
                result, can_answer=self.can_answer, max_echo_bytes=limits.max_echo_bytes
            )
            match step:
                case rules.Complete():
                    return self.called(name, result)
                case rules.AskInput():
                    state = step.state
                    answers = yield Ask(step.requests)
                    if answers is None:
                        raise ServerAnswered(
                            "the input the server asked for was declined", reason="input_declined"
                        )
                    inputs = dict(answers)
                    shed = 0
                case rules.Backoff():
                    state = step.state
                    inputs = None
                    delay = rules.backoff_delay(shed, self._jitter())
                    shed += 1
                    yield Sleep(reply.at + delay)
                case _:  # pragma: no cover - the union is exhausted above (mypy checks it)
                    assert_never(step)

    def called(self, name: str | None, result: Mapping[str, Any]) -> ToolCalled:
        """A ``CallToolResult`` object read as the call's (a task's too), checked against
        the output schema of ``name`` when known (a resumed task's tool may not be)."""
        call = parse_call_result(result, modern=self.session.era is _MODERN)
        schema = None if call.is_error or name is None else self.toolset.output_schema(name)
        if schema is not None:
            assert name is not None
            from ..schema.output import check_output

            check_output(name, schema, result, self.limits)
            call = dataclasses.replace(call, validated=True)
        return ToolCalled(result=call)
