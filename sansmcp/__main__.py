"""``python -m sansmcp``: the command line (see :mod:`sansmcp.cli`)."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
