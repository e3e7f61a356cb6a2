"""The scripted model server (docs/architecture.md §16): an OpenAI-compatible test and
demo double driven by a YAML script.  It never pretends to be a real model.

It ships inside the package (not under ``tests/``) because it is a product
command: ``ongrid fake-llm`` serves it for demos, evaluation runs
(``ongridd.evals``) and operators trying Ongrid without a model.  The daemon
never imports it: ``ongridd.daemon`` and ``ongridd serve`` stay free of it
(tests/test_fakellm_isolation.py checks ``sys.modules`` in a fresh process).

``script`` (load/validate, no HTTP imports) is cheap to import; the server
(a small HTTP/1.1 server on Trio and ``h11``) is imported on first use of
:func:`open_fake_llm`, :func:`serve_fake_llm` or :class:`FakeLLM`.
"""

from __future__ import annotations

from typing import Any

from ongridd.fakellm.script import Script, ScriptError, load_script, parse_script

__all__ = ["FakeLLM", "Script", "ScriptError", "load_script", "open_fake_llm", "parse_script", "serve_fake_llm"]


def __getattr__(name: str) -> Any:
    if name in ("FakeLLM", "open_fake_llm", "serve_fake_llm", "RecordedRequest"):
        from ongridd.fakellm import server

        return getattr(server, name)
    raise AttributeError(f"module 'ongridd.fakellm' has no attribute {name!r}")
