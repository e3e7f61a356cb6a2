"""``ongridd serve`` — the foreground daemon."""

from __future__ import annotations

import argparse
import sys

from ongridd.errors import ConfigError, StoreError, leaf_exceptions


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the daemon in the foreground (logs to stderr)")
    p.add_argument("--config", help="configuration file (default /etc/ongrid/ongrid.yaml if present)")
    p.add_argument("--listen", help="HOST:PORT to listen on (default 127.0.0.1:8650)")
    p.add_argument("--state-dir", help="state folder (database, installed plugins, edited agents)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import gc

    # The start-up imports allocate ~110,000 objects, nearly all of which live
    # as long as the daemon: collections among them free next to nothing, and
    # cost ~10 % of the time to /healthz during the imports and a ~40 ms pause
    # of every thread after them.  So no collection during the imports, then
    # they are frozen (not walked until start-up is done: ``tune_gc``
    # unfreezes, collects and freezes again); the collector is back on before
    # anything runs.
    gc.disable()
    try:
        import trio

        from ongridd import logs
        from ongridd.config import load_config
        from ongridd.daemon import import_server, run_daemon

        import_server()
    finally:
        gc.freeze()
        gc.enable()

    logs.configure(args.log_level)
    log = logs.get_logger("ongridd.serve")
    try:
        config = load_config(args.config, overrides={("server", "listen"): args.listen,
                                                     ("state_dir",): args.state_dir})
    except ConfigError as exc:
        print(f"ongridd: {exc}", file=sys.stderr)
        return 2
    try:
        try:
            trio.run(run_daemon, config)
        except BaseExceptionGroup as group:
            raise _sole_leaf(group) from None
    except ConfigError as exc:
        log.error("startup_failed", error=str(exc))
        print(f"ongridd: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        log.error("startup_failed", error=str(exc))
        print(f"ongridd: database error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # e.g. address already in use
        log.error("startup_failed", error=str(exc))
        print(f"ongridd: {exc}", file=sys.stderr)
        return 1
    return 0


def _sole_leaf(group: BaseExceptionGroup) -> BaseException:
    """The meaningful start-up exception inside nested groups, else the group."""
    for exc in leaf_exceptions(group):
        if isinstance(exc, (ConfigError, StoreError, OSError, KeyboardInterrupt)):
            return exc
    return group
