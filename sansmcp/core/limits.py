"""Every bound sansmcp enforces, in one value.

Defaults follow DESIGN.md's bounds table (and, through it, the reference design).
Times are seconds; sizes are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limits"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    # deadlines
    dial_timeout: float = 30.0
    connect_timeout: float = 30.0
    list_timeout: float = 120.0
    call_timeout: float = 120.0
    close_timeout: float = 2.0
    cancel_grace: float = 1.0
    # after an answer arrives on an event stream, how long to wait for that stream to end
    # (so its socket can carry the next request) before moving on anyway
    stream_end_wait: float = 0.05
    # budgets per Conn
    max_response_bytes: int = 8 << 20
    max_header_bytes: int = 64 << 10
    max_responses: int = 256
    # listing and calls
    max_tool_pages: int = 100
    max_stream_retries: int = 3
    max_call_attempts: int = 10
    max_tool_bytes: int = 256 << 10
    max_echo_bytes: int = 64 << 10
    max_server_requests: int = 16
    max_informational: int = 8
    # HTTP/2 floods: control frames per connection per window, tiny DATA frames per response
    h2_max_control_frames: int = 1000
    h2_control_window: float = 10.0
    h2_max_small_data_frames: int = 10_000
    h2_max_concurrent_streams: int = 100
    # frames (HEADERS + CONTINUATION) in one HTTP/2 header block; h2 itself refuses more than 64
    h2_max_header_frames: int = 32
    # pool
    pool_idle_timeout: float = 30.0
    pool_max_idle_per_origin: int = 8
    pool_max_sockets: int = 64
    # JSON parsing
    max_json_depth: int = 512
    # bytes a server sends on one socket that no live exchange is charged for: HTTP/2
    # control frames, frames of unknown types, frames on streams we reset or that ended,
    # the server's preface; HTTP/1.1 bytes outside a response.  Past it the socket closes
    # and its exchanges fail (cause "budget", bound "max_unowned_bytes_per_socket")
    max_unowned_bytes_per_socket: int = 1 << 20
