"""The MCP client machine as composed parts under a thin façade (:mod:`.machine`).

=================  =================================================================
``events``         what the machine emits (``Output``)
``settings``       ``ConnSettings`` and the one check of ``protocol_versions``
``session``        the era and its transitions (a table), version and session id
``requests``       the one request builder and the headers of every request
``budget``         every per-connection count: bytes, responses, exhaustion
``transport``      exchanges: roles, bodies, event streams, held answers, resends
``rules``          pure decisions, each tested by table
``notifications``  progress, server notifications, telemetry observations
``toolset``        the tools a connection knows, their output schemas, the cache's hooks
``operations``     the operations as generator scripts
``state``          the phase table and the state snapshot type
``machine``        ``McpMachine``: the façade and the driver API
=================  =================================================================
"""

from __future__ import annotations

from .events import (
    CancelExchange,
    Closed,
    Connected,
    InputRequired,
    OperationFailed,
    Output,
    StartExchange,
    TaskReported,
    Terminal,
    ToolCalled,
    ToolsListed,
)
from .machine import McpMachine
from .notifications import (
    LOG_LEVELS,
    LogMessage,
    Notification,
    Observation,
    Progress,
    RequestEnded,
    RequestStarted,
    TaskUpdated,
)
from .requests import META_CAPABILITIES, META_CLIENT_INFO, META_VERSION
from .settings import ConnSettings, usable_versions
from .state import MachineState, Phase

__all__ = [
    "LOG_LEVELS",
    "META_CAPABILITIES",
    "META_CLIENT_INFO",
    "META_VERSION",
    "CancelExchange",
    "Closed",
    "ConnSettings",
    "Connected",
    "InputRequired",
    "LogMessage",
    "MachineState",
    "McpMachine",
    "Notification",
    "Observation",
    "OperationFailed",
    "Output",
    "Phase",
    "Progress",
    "RequestEnded",
    "RequestStarted",
    "StartExchange",
    "TaskReported",
    "TaskUpdated",
    "Terminal",
    "ToolCalled",
    "ToolsListed",
    "usable_versions",
]
