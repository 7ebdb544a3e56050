"""``make dist``'s last step: what the sdist and the wheel in ``dist/`` hold.

Fails unless there is exactly one sdist and one wheel, both of the version in
``sansmcp/core/version.py``; the wheel holds the package with ``py.typed`` and the
LICENSE, and no tests; the sdist holds the LICENSE, README, CHANGELOG, the package and
its tests, and none of the benchmark results or plots (``bench/results``), the
conformance suite's install (``.conformance``), npm's ``node_modules`` or local state.
Run: ``python tools/check_dist.py [DIST_DIR]``.
"""

from __future__ import annotations

import re
import sys
import tarfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN_IN_SDIST = (
    "bench/results/",
    ".conformance/",
    "node_modules/",
    ".venv",
    "site/",
    "__pycache__/",
    ".hypothesis/",
    ".mypy_cache/",
    ".coverage",
)


def version() -> str:
    text = (REPO / "sansmcp" / "core" / "version.py").read_text(encoding="utf-8")
    found = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    assert found, "no __version__ in sansmcp/core/version.py"
    return found.group(1)


def problems(dist: Path) -> list[str]:
    wanted = version()
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        return [f"want one wheel and one sdist in {dist}, found {wheels + sdists}"]
    found: list[str] = []
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
    info = f"sansmcp-{wanted}.dist-info/"
    for needed in ("sansmcp/__init__.py", "sansmcp/py.typed", f"{info}licenses/LICENSE"):
        if needed not in names:
            found.append(f"the wheel lacks {needed}")
    found += [f"the wheel holds {name}" for name in names if name.startswith("tests/")]
    with tarfile.open(sdists[0]) as sdist:
        members = [name.split("/", 1)[1] for name in sdist.getnames() if "/" in name]
    for needed in ("LICENSE", "README.md", "CHANGELOG.md", "sansmcp/py.typed", "PKG-INFO"):
        if needed not in members:
            found.append(f"the sdist lacks {needed}")
    if not any(name.startswith("tests/") for name in members):
        found.append("the sdist has no tests")
    for name in members:
        if any(part in f"{name}/" for part in FORBIDDEN_IN_SDIST):
            found.append(f"the sdist holds {name}")
    if sdists[0].name != f"sansmcp-{wanted}.tar.gz":
        found.append(f"{sdists[0].name} is not version {wanted}")
    return found


def main() -> int:
    dist = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "dist"
    found = problems(dist)
    for problem in found:
        print(f"check_dist: {problem}", file=sys.stderr)
    if not found:
        print(f"check_dist: {dist} holds sansmcp {version()}: sdist and wheel as they should be")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
