"""The ``voxledger`` command: a thin click layer over flows (work) and stores (queries).

Library errors (``VoxledgerError``) become ``ClickException`` here, at one boundary, so every
failure exits non-zero with a one-paragraph message and no traceback.
"""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from typing import Any

import click

from voxledger.schemas.errors import VoxledgerError


class Boundary(click.Group):
    """A click group that turns library errors into clean, non-zero exits."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except VoxledgerError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
        except (click.exceptions.Exit, click.ClickException, click.Abort, KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001  (the one boundary: a defect still ends in one line)
            raise click.ClickException(
                f"unexpected {type(exc).__name__}: {exc} (a defect in voxledger; the run's receipt and Prefect's logs keep the details)"
            ) from exc


@click.group(cls=Boundary)
@click.option("--home", envvar="VOXLEDGER_HOME", type=click.Path(file_okay=False), default=None,
              help="Home directory of the store and catalog (default ./.voxledger).")
@click.option("--lock-timeout", type=float, default=60.0, show_default=True,
              help="Seconds to wait for another process holding the catalog.")
@click.pass_context
def main(ctx: click.Context, home: str | None, lock_timeout: float) -> None:
    """voxledger: provable fine-tuning pipelines for text-to-speech.

    Example: voxledger --home ./.voxledger store verify
    """
    ctx.obj = {"home": home, "lock_timeout": lock_timeout}


def open_home(ctx: click.Context) -> Any:
    """The Home for this invocation (created on first use)."""
    from voxledger.stores.home import Home

    obj = ctx.find_root().obj
    if "home_obj" not in obj:
        obj["home_obj"] = Home(obj["home"], lock_timeout_s=obj["lock_timeout"])
    return obj["home_obj"]


def run_flow(ctx: click.Context, fn: Any, *args: Any, quiet: bool = False, **kwargs: Any) -> Any:
    """Run a Prefect flow for this home (see ``flows.runtime``) with a live progress line.

    Every command that does work goes through here, so all of it shows in Prefect's run history.
    """
    from rich.console import Console

    from voxledger.flows.progress import reporting
    from voxledger.flows.runtime import prefect_session

    home = open_home(ctx)
    console = Console(stderr=True)
    with console.status("starting", spinner="dots") if not quiet else nullcontext() as status:
        def show(message: str) -> None:
            if status is not None:
                status.update(message)

        show("connecting to the Prefect server")
        with prefect_session(home.root), reporting(show):
            return fn(*args, **kwargs)


def emit_json(value: Any) -> None:
    """Print JSON for scripts (stable key order)."""
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


def _register() -> None:
    # each module attaches its commands to ``main``
    from voxledger import (  # noqa: F401
        cli_audit,
        cli_capabilities,
        cli_core,
        cli_corpus,
        cli_cosyvoice3,
        cli_demo,
        cli_equivalence,
        cli_init,
        cli_listening,
        cli_package,
        cli_provenance,
        cli_server,
        cli_stages,
    )


_register()

if __name__ == "__main__":
    sys.exit(main())
