"""Helpers for the marketplace tests (fixtures in conftest.py): plugin packages made on the fly, an
index that lists them with real hashes, and a service on a real registry
holder and a real Store (SQLite in tmp_path).

Python cannot unload modules and every test runs in one process, so each
generated plugin gets a module name of its own (``mp_<random>``), and
every test removes the plugin folders it installed (a folder left behind
would be found by later tests through ``sys.path``).  The real example
packages always install into one session-wide state dir, so their modules
are always loaded from the same folder (and reused, as in a daemon).
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import shutil
import sys
import textwrap
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from ongridd.config import structure
from ongridd.marketplace.index import source_sha256
from ongridd.marketplace.install import MarketplaceService
from ongridd.plugins.build import RegistryBuilder
from ongridd.runtime.registries import RegistryHolder

ROOT = Path(__file__).resolve().parents[2]
MARKETPLACE = ROOT / "marketplace"
from tests.conftest import need  # noqa: E402,F401  (re-exported; one skip-or-fail rule for the whole suite)


def setuptools_builds_wheels() -> bool:
    """setuptools >= 70.1 (bdist_wheel built in) is importable here."""
    try:
        import setuptools
    except ImportError:
        return False
    parts = setuptools.__version__.split(".")
    try:
        return (int(parts[0]), int(parts[1]) if len(parts) > 1 else 0) >= (70, 1)
    except ValueError:
        return False


# ---- packages -------------------------------------------------------------------


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(dest: Path, dist: str, version: str, files: Mapping[str, str | bytes],
               entry_points: Mapping[str, str] | None = None, requires: tuple[str, ...] = ()) -> Path:
    """Write a pure-Python wheel (``py3-none-any``) with a correct RECORD."""
    norm = dist.replace("-", "_")
    info = f"{norm}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    content: dict[str, bytes] = {rel: (v.encode() if isinstance(v, str) else v) for rel, v in files.items()}
    content[f"{info}/METADATA"] = meta.encode()
    content[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: ongrid-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    if entry_points:
        content[f"{info}/entry_points.txt"] = ("[ongrid]\n" + "".join(
            f"{k} = {v}\n" for k, v in entry_points.items())).encode()
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{norm}-{version}-py3-none-any.whl"
    records = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel, data in content.items():
            zf.writestr(rel, data)
            records.append(f"{rel},{_record_hash(data)},{len(data)}")
        records.append(f"{info}/RECORD,,")
        zf.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    return path


PLUGIN_TEMPLATE = '''
"""A generated test plugin."""
from pathlib import Path
from ongridd.plugins.api import Tool, hookimpl
{import_code}
TOOL = "{tool}"
PERSONA = "{persona}"
HERE = Path(__file__).resolve().parent

async def _handler(args, ctx):
    return {{"tool": TOOL, "module": __name__, "echo": args.get("text")}}

@hookimpl
def ongrid_register_tools(register, context):
    {tools_code}

@hookimpl
def ongrid_register_personas(register):
    {personas_code}

@hookimpl
def ongrid_register_redirect_stubs(register):
    {stubs_code}
'''

PERSONA_TEMPLATE = """---
name: {name}
description: A generated persona for marketplace tests.
when_to_use: Only in tests.
tools: [{tool}]
permission_mode: read-only
max_turns: 3
---
You are a generated test persona. Use {tool}.
"""


class PluginSpec:
    """A generated plugin: names plus the code/files of the variant asked for.

    ``variant``: ``good``, ``import_raises``, ``hook_raises``, ``bad_persona``,
    ``stub_unknown_persona``, ``builtin_tool_name``, ``reserved_persona``,
    ``builtin_persona``, ``persona_outside``, ``no_entry_point``, ``big_data``.
    """

    def __init__(self, variant: str = "good", *, module: str | None = None, version: str = "0.1.0"):
        self.variant = variant
        self.token = secrets.token_hex(4)
        self.module = module or f"mp_{self.token}"
        self.dist = self.module.replace("_", "-")
        self.version = version
        self.tool = f"{self.module}_probe"
        self.persona = f"{self.module.replace('_', '-')}-persona"

    def files(self, outside: Path | None = None) -> dict[str, str]:
        v = self.variant
        import_code = 'raise RuntimeError("boom at import of the test plugin")' if v == "import_raises" else ""
        tool = "host_bash" if v == "builtin_tool_name" else self.tool
        tools_code = (f'raise ValueError("hook exploded in {self.module}")' if v == "hook_raises" else
                      f'register(Tool(name="{tool}", description="A generated test tool.", handler=_handler, '
                      'parameters={"type": "object", "properties": {"text": {"type": "string"}}}))')
        personas_code = 'register(HERE / "personas")'
        if v == "persona_outside":
            personas_code = f'register({str(outside)!r})'
        stub_persona = "no-such-persona" if v == "stub_unknown_persona" else self.persona
        stubs_code = f'register(tool=TOOL, persona="{stub_persona}", reason="generated test stub")'
        persona_name = {"reserved_persona": "reviewer", "builtin_persona": "specialist-disk"}.get(v, self.persona)
        persona_text = PERSONA_TEMPLATE.format(name=persona_name, tool=tool)
        if v == "bad_persona":
            persona_text = f"---\nname: {self.persona}\ndescription: broken\nuser: \"x\"\n\ttools: [a]\n---\nbody\n"
        init = PLUGIN_TEMPLATE.format(import_code=import_code, tool=tool, persona=self.persona,
                                      tools_code=tools_code, personas_code=personas_code, stubs_code=stubs_code)
        out = {f"{self.module}/__init__.py": textwrap.dedent(init),
               f"{self.module}/personas/{self.persona}.md": persona_text}
        if v == "big_data":  # 256 KiB of data beside the code (a test lowers the size limit)
            out[f"{self.module}/data.txt"] = "0" * (256 * 1024)
        return out

    def wheel(self, dest: Path, outside: Path | None = None) -> Path:
        eps = None if self.variant == "no_entry_point" else {self.module: self.module}
        return make_wheel(dest, self.dist, self.version, self.files(outside), eps)

    def project(self, dest: Path) -> Path:
        """The same plugin as a setuptools project folder (for folder sources)."""
        folder = dest / self.dist
        for rel, text in self.files().items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text, encoding="utf-8")
        (folder / "pyproject.toml").write_text(textwrap.dedent(f"""
            [build-system]
            requires = ["setuptools>=70.1"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "{self.dist}"
            version = "{self.version}"
            dependencies = []

            [project.entry-points.ongrid]
            {self.module} = "{self.module}"

            [tool.setuptools]
            packages = ["{self.module}"]

            [tool.setuptools.package-data]
            {self.module} = ["personas/*.md"]
            """), encoding="utf-8")
        return folder


def write_index(path: Path, entries: list[dict[str, Any]]) -> Path:
    """Write an index; an entry without ``sha256`` gets the real hash of its source."""
    out = []
    for e in entries:
        e = dict(e)
        if "sha256" not in e:
            e["sha256"] = source_sha256(path.parent / e["source"])
        out.append(e)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        YAML(typ="safe", pure=True).dump({"plugins": out}, fh)
    return path


def entry_for(spec: PluginSpec, source: Path, index: Path, **over: Any) -> dict[str, Any]:
    e = {"name": spec.dist, "version": spec.version, "description": f"test plugin {spec.module}",
         "source": os.path.relpath(source, index.parent)}
    e.update(over)
    return e


# ---- the service --------------------------------------------------------------------


class Env:
    """A service on a real holder and Store; ``index`` is this test's index file."""

    def __init__(self, *, config: Any, store: Any, holder: RegistryHolder, builder: RegistryBuilder,
                 service: MarketplaceService, index: Path, tmp: Path):
        self.config = config
        self.store = store
        self.holder = holder
        self.builder = builder
        self.service = service
        self.index = index
        self.tmp = tmp

    @property
    def plugins_root(self) -> Path:
        return self.service.plugins_root

    def plugin_dir_entries(self) -> list[str]:
        root = self.plugins_root
        return sorted(p.name for p in root.iterdir()) if root.is_dir() else []

    def add(self, spec: PluginSpec, *, source: Path | None = None, **over: Any) -> dict[str, Any]:
        """Build ``spec``'s wheel (unless ``source`` is given) and list it in the index."""
        if source is None:
            source = spec.wheel(self.tmp / "dist", outside=self.tmp / "elsewhere")
        entries = self._entries()
        entries = [e for e in entries if e["name"] != spec.dist]
        entries.append(entry_for(spec, source, self.index, **over))
        write_index(self.index, entries)
        return entries[-1]

    def _entries(self) -> list[dict[str, Any]]:
        if not self.index.exists():
            return []
        data = YAML(typ="safe", pure=True).load(self.index.read_text(encoding="utf-8")) or {}
        return list(data.get("plugins") or [])


def make_config(tmp: Path, state_dir: Path | None = None, **extra: Any) -> Any:
    data = {"state_dir": str(state_dir or tmp / "var"),
            "database": {"url": f"sqlite:///{tmp / 'db' / 'ongrid.db'}"},
            "agents": {"user_dirs": [str(tmp / "agents")]}}
    data.update(extra)
    (tmp / "db").mkdir(parents=True, exist_ok=True)
    return structure(data)


def clean_plugins(root: Path) -> None:
    if root.is_dir():
        for p in root.iterdir():
            shutil.rmtree(p, ignore_errors=True)


def python_env() -> dict[str, str]:
    """Environment for a child ``python`` that imports ongridd from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "plugins")] + [
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


CLI = [sys.executable, "-c", "from ongridd.cli import ongrid_main; ongrid_main()"]
