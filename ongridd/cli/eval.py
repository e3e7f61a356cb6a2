"""``ongrid eval`` — replay golden incidents through the real runtime and score them.

``ongrid eval [--suite DIR] [--llm-base-url URL --model NAME] [--json] [--only NAME...]``

Without ``--suite`` the built-in suite runs; without ``--llm-base-url`` each
incident's ``script:`` drives the scripted model.  The table (or, with
``--json``, one JSON object) goes to stdout, progress to stderr.  Exit 0
when every incident passes (F1 ≥ 0.5 and no loop), 1 otherwise, 2 on a
usage error (bad flags, a bad suite, an incident without a script when no
model is given).  The API key for ``--llm-base-url`` is read from the
variable named by ``llm.api_key_env`` (default ``OPENAI_API_KEY``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="score the assistant on golden incidents (recorded tool results)",
                       description="Replay golden incidents end to end through the real runtime with recorded "
                                   "tool results and score the answers (root-cause entity F1, tool calls, "
                                   "dispatches, model calls, loops, time).")
    p.add_argument("--suite", metavar="DIR", help="folder of incident YAML files (default: the built-in suite)")
    p.add_argument("--llm-base-url", metavar="URL",
                   help="an OpenAI-compatible endpoint (…/v1); default: each incident's scripted model")
    p.add_argument("--model", metavar="NAME", help="model name at --llm-base-url (required with it)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--only", nargs="+", metavar="NAME", default=[], help="run only these incidents")
    p.add_argument("--list", action="store_true", help="print the suite's incidents (name and question) and run none")
    p.set_defaults(func=run)


def _usage(message: str) -> int:
    print(f"ongrid eval: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    import trio

    from ongridd import logs
    from ongridd.config import read_secret
    from ongridd.errors import ConfigError
    from ongridd.evals import builtin_suite_dir
    from ongridd.evals.report import table, to_json
    from ongridd.evals.runner import SCRIPTED_MODEL, run_incidents
    from ongridd.evals.suite import load_suite

    if bool(args.llm_base_url) != bool(args.model):
        return _usage("--llm-base-url and --model go together")
    folder = Path(args.suite) if args.suite else builtin_suite_dir()
    try:
        incidents = load_suite(folder, args.only)
    except ConfigError as exc:
        return _usage(str(exc))
    if args.list:
        from ongridd.cli.termui import safe_text

        width = max((len(i.name) for i in incidents), default=0)
        for incident in incidents:
            print(safe_text(f"{incident.name:<{width}}  {' '.join(incident.question.split())}"))
        return 0
    if not args.llm_base_url:
        unscripted = [i.name for i in incidents if i.script is None]
        if unscripted:
            return _usage(f"no --llm-base-url given and these incidents have no script: {', '.join(unscripted)}")
        missing = [str(i.script) for i in incidents if i.script is not None and not i.script.is_file()]
        if missing:
            return _usage(f"script file not found: {', '.join(missing)}")
    logs.configure("ERROR")
    model = args.model if args.llm_base_url else SCRIPTED_MODEL
    api_key = read_secret("OPENAI_API_KEY") if args.llm_base_url else None

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    state = Path(tempfile.mkdtemp(prefix="ongrid-eval-"))
    try:
        results = trio.run(lambda: run_incidents(incidents, state_dir=state, llm_base_url=args.llm_base_url,
                                                 model=args.model, api_key=api_key, progress=progress))
    except KeyboardInterrupt:
        return 130
    except ConfigError as exc:
        return _usage(str(exc))
    finally:
        shutil.rmtree(state, ignore_errors=True)
    if args.json:
        from ongridd.cli.termui import escape_controls

        print(escape_controls(json.dumps(to_json(model, results), ensure_ascii=False)))
    else:
        print(table(model, results))
    return 0 if all(r.passed for r in results) else 1
