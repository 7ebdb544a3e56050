"""The pure, sans-I/O heart of sansmcp: state machines fed bytes, events and ``now``.

Nothing under this package opens a socket, reads a clock, sleeps or logs.
"""

__version__ = "0.1.0"
