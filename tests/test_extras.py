"""An extra that is not installed is a CallerError naming it, when it is first needed.

``sansmcp.stores`` imports without redis-py and without ``cryptography``; ``RedisStore``
and ``AtRest`` say which extra to install when they are built.  Each case runs in a
fresh interpreter in which the missing package cannot be imported
(``sys.modules[name] = None`` makes its import raise ImportError).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SECRET = "b'fleet-secret-of-the-tests-32byte'"


def _without(blocked: str, statement: str) -> dict[str, str]:
    """Run ``statement`` with the package ``blocked`` unimportable; what it raised."""
    probe = "\n".join(
        (
            "import json, sys",
            f"sys.modules[{blocked!r}] = None",
            "try:",
            f"    {statement}",
            "except BaseException as exc:",
            "    print(json.dumps({'type': type(exc).__qualname__,",
            "                      'module': type(exc).__module__, 'message': str(exc)}))",
            "else:",
            "    print(json.dumps({'type': None}))",
        )
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("blocked", ["redis", "cryptography"])
def test_the_stores_import_without_their_extras(blocked: str) -> None:
    assert _without(blocked, "import sansmcp, sansmcp.stores") == {"type": None}
    assert _without(blocked, "from sansmcp.stores import *; LocalStore(); SharedStore") == {
        "type": None
    }
    assert _without(blocked, "from sansmcp.stores import RedisStore, AtRest") == {"type": None}


def test_a_redis_store_without_redis_py_names_the_redis_extra() -> None:
    raised = _without(
        "redis",
        f"from sansmcp.stores import RedisStore; RedisStore('redis://localhost', secret={SECRET})",
    )
    assert raised == {
        "type": "CallerError",
        "module": "sansmcp.core.errors",
        "message": "RedisStore needs the 'redis' package (redis-py): pip install 'sansmcp[redis]'",
    }


def test_sealing_at_rest_without_cryptography_names_the_oauth_extra() -> None:
    expected = {
        "type": "CallerError",
        "module": "sansmcp.core.errors",
        "message": "encrypting stored values needs the 'cryptography' package: "
        "pip install 'sansmcp[oauth]'",
    }
    key = "[('k1', bytes(16))]"
    assert _without("cryptography", f"from sansmcp.stores import AtRest; AtRest({key})") == expected
    built = (
        "from sansmcp.stores import RedisStore; "
        f"RedisStore('redis://localhost', secret={SECRET}, at_rest={key})"
    )
    assert _without("cryptography", built) == expected


def test_with_the_extras_they_build() -> None:
    """The probe can fail: with nothing blocked, the same statements raise nothing."""
    built = (
        "from sansmcp.stores import RedisStore; "
        f"RedisStore('redis://localhost', secret={SECRET}, at_rest=[('k1', bytes(16))]).close()"
    )
    assert _without("nothing-blocked", built) == {"type": None}
