"""This release's version (PEP 440): the one place it is written.

``pyproject.toml`` reads it from here (hatch's version source); ``sansmcp.core`` and
``sansmcp`` re-export it, and the modules of the core that name it (the MCP package's
``clientInfo`` and ``User-Agent``) import it from here, never from a package above them.
"""

__version__ = "0.1.0"
