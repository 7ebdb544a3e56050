"""``python -m sansmcp.cli``: the command line (see :mod:`sansmcp.cli`)."""

from __future__ import annotations

import sys

from . import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
