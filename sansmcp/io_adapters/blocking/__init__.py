"""The blocking adapter's own folder: what runs a Client without an event loop.

``sync.py`` is the adapter (``Client``, ``Conn``, ``connect``, ``input_deadline``; its
public name is :mod:`sansmcp.io_adapters.sync`); ``_selectloop.py`` and ``_turns.py`` are
the runtime it carries, knowing sockets and threads, not MCP: the readiness loop (non-
blocking connects, TLS over ``MemoryBIO``, buffered writes, the wake-up, bounded worker
threads, interrupt-safe lock re-takes) and the turn-taking (leader/follower, the watcher).
"""
