"""``make dist``'s last step: what the sdist and the wheel in ``dist/`` hold.

Fails unless there is exactly one sdist and one wheel, both of the version in
``sansmcp/core/version.py``; the wheel holds the package with ``py.typed`` and the
LICENSE, and no tests; the sdist holds the LICENSE, README, CHANGELOG, the package and
its tests, and none of the benchmark results or plots (``bench/results``), the
conformance suite's install (``.conformance``), npm's ``node_modules`` or local state.
The wheel also holds every module of the source tree's ``sansmcp/`` (``sansmcp.stores``
among them); its metadata, and the sdist's, declare each extra of ``EXTRAS`` with the
package it needs; and its console script works: the wheel is installed (no dependency,
no index) into a scratch folder, and that folder's ``bin/sansmcp --version`` prints the
version, running the wheel's own code.
Run: ``python tools/check_dist.py [DIST_DIR]`` with the interpreter of a venv that has
sansmcp's dependencies (``make dist`` uses ``.venv``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from email.parser import HeaderParser
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
# The extras a user installs (README "Install"), each with a package it must require.
EXTRAS = {"redis": "redis", "oauth": "cryptography", "otel": "opentelemetry-api", "trio": "trio"}
IN_THE_WHEEL = (
    "sansmcp/__init__.py",
    "sansmcp/py.typed",
    "sansmcp/cli/__init__.py",
    "sansmcp/stores/__init__.py",
    "sansmcp/stores/local.py",
    "sansmcp/stores/redis_store.py",
    "sansmcp/stores/atrest.py",
)


def version() -> str:
    text = (REPO / "sansmcp" / "core" / "version.py").read_text(encoding="utf-8")
    found = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    assert found, "no __version__ in sansmcp/core/version.py"
    return found.group(1)


def extras_problems(metadata: str, where: str) -> list[str]:
    """What ``metadata`` (a METADATA or PKG-INFO) lacks of ``EXTRAS``."""
    headers = HeaderParser().parsestr(metadata)
    provided = set(headers.get_all("Provides-Extra") or [])
    requires = headers.get_all("Requires-Dist") or []
    found = []
    for extra, package in EXTRAS.items():
        if extra not in provided:
            found.append(f"{where} does not declare the extra {extra!r}")
            continue
        marker = re.compile(rf"""^{re.escape(package)}\b[^;]*;\s*extra\s*==\s*["']{extra}["']$""")
        if not any(marker.match(requirement.strip()) for requirement in requires):
            found.append(f"{where}: the extra {extra!r} does not require {package}")
    return found


def console_script_problems(wheel: Path, wanted: str) -> list[str]:
    """Install ``wheel`` alone into a scratch folder; its ``sansmcp --version`` must work."""
    with tempfile.TemporaryDirectory(prefix="check_dist-") as scratch:
        target = Path(scratch)
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
        done = subprocess.run(
            [*pip, "--target", str(target), str(wheel)], capture_output=True, text=True
        )
        if done.returncode != 0:
            return [f"the wheel does not install: {done.stderr.strip()[-500:]}"]
        script = target / "bin" / "sansmcp"
        if not script.is_file():
            return ["installing the wheel makes no bin/sansmcp console script"]
        env = {**os.environ, "PYTHONPATH": str(target)}
        ran = subprocess.run(
            [str(script), "--version"],
            capture_output=True,
            text=True,
            env=env,
            cwd=target,
            timeout=60,
        )
        if ran.returncode != 0 or wanted not in ran.stdout:
            return [
                f"the console script's --version exits {ran.returncode}: "
                f"{(ran.stdout + ran.stderr).strip()[-500:]!r}"
            ]
        probe = "import sansmcp.cli; print(sansmcp.cli.__file__)"
        where = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=target
        )
        if not where.stdout.strip().startswith(str(target)):
            return [f"the console script ran {where.stdout.strip()!r}, not the wheel's code"]
    return []


def problems(dist: Path) -> list[str]:
    wanted = version()
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        return [f"want one wheel and one sdist in {dist}, found {wheels + sdists}"]
    found: list[str] = []
    info = f"sansmcp-{wanted}.dist-info/"
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
        metadata, entry_points = (
            wheel.read(name).decode() if name in names else ""
            for name in (f"{info}METADATA", f"{info}entry_points.txt")
        )
    modules = (path.relative_to(REPO).as_posix() for path in (REPO / "sansmcp").rglob("*.py"))
    for needed in sorted({*IN_THE_WHEEL, *modules, f"{info}licenses/LICENSE"}):
        if needed not in names:
            found.append(f"the wheel lacks {needed}")
    found += [f"the wheel holds {name}" for name in names if name.startswith("tests/")]
    found += extras_problems(metadata, "the wheel's METADATA")
    if re.search(r"^\[console_scripts\]\n(.+\n)*?sansmcp = sansmcp\.cli:main$", entry_points, re.M):
        found += console_script_problems(wheels[0], wanted)
    else:
        found.append("the wheel declares no console script sansmcp = sansmcp.cli:main")
    with tarfile.open(sdists[0]) as sdist:
        members = [name.split("/", 1)[1] for name in sdist.getnames() if "/" in name]
        pkg_info = (
            sdist.extractfile(f"sansmcp-{wanted}/PKG-INFO") if "PKG-INFO" in members else None
        )
        found += extras_problems(
            pkg_info.read().decode() if pkg_info else "", "the sdist's PKG-INFO"
        )
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
