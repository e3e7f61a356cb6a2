"""Marketplace ``pip`` and the plugin validator run third-party code: they
see a scrubbed environment (no API keys, no tokens), with what pip needs kept."""

from __future__ import annotations

import json
from pathlib import Path

from mp_helpers import PluginSpec, need, setuptools_builds_wheels

from ongridd.secretset import REGISTRY

API_KEY = "sk-mp-scrub-0123456789abcdef"
TOKEN = "mp-scrub-token-0123456789"

#: written into the test package: dump the environment of whoever runs this
#: code (the build of ``setup.py`` under pip, the plugin import in the validator)
RECORDER = '''
import json as _json, os as _os, sys as _sys
_where = {where!r}
if _where == "setup" or _sys.argv and _sys.argv[0].endswith("validate.py"):
    with open({out!r} + "." + _where + "." + str(_os.getpid()), "w") as _fh:
        _json.dump(dict(_os.environ), _fh)
'''


def _dumps(out: Path, where: str) -> list[dict[str, str]]:
    return [json.loads(p.read_text()) for p in out.parent.glob(f"{out.name}.{where}.*")]


async def test_pip_build_and_validator_get_no_secrets(env, monkeypatch):
    need(setuptools_builds_wheels(), "setuptools >= 70.1 in the daemon's environment (folder sources)")
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("ONGRID_TOKENS", f"alice:{TOKEN}")
    monkeypatch.setenv("SOME_COPY_OF_IT", f"prefix-{TOKEN}")  # a secret copied into another variable
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "7")  # pip settings are kept
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    out = env.tmp / "envdump"
    spec = PluginSpec()
    project = spec.project(env.tmp / "projects")
    (project / "setup.py").write_text(RECORDER.format(where="setup", out=str(out))
                                      + "\nfrom setuptools import setup\nsetup()\n")
    init = project / spec.module / "__init__.py"
    init.write_text(RECORDER.format(where="validate", out=str(out)) + init.read_text())
    env.add(spec, source=project)
    with REGISTRY.hold([API_KEY, TOKEN]):  # what a running daemon holds
        result = await env.service.install(spec.dist, actor="t")
    assert result["registered"]["tools"] == [spec.tool]
    builds, validations = _dumps(out, "setup"), _dumps(out, "validate")
    assert builds and validations, sorted(p.name for p in out.parent.iterdir())
    for seen in builds + validations:
        text = json.dumps(seen)
        assert API_KEY not in text and TOKEN not in text
        assert "OPENAI_API_KEY" not in seen and "ONGRID_TOKENS" not in seen and "SOME_COPY_OF_IT" not in seen
        assert seen.get("PATH")
    for seen in builds:  # pip keeps its own settings and the proxy
        assert seen.get("PIP_DEFAULT_TIMEOUT") == "7" and seen.get("HTTPS_PROXY") == "http://proxy.invalid:3128"
    for seen in validations:
        assert "PIP_DEFAULT_TIMEOUT" not in seen and seen.get("PYTHONPATH")
