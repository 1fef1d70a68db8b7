"""``voxledger server``: the home's long-lived local Prefect server (started on demand)."""

from __future__ import annotations

import click

from voxledger.cli.common import emit_json, json_option, open_home


@click.group("server")
def server() -> None:
    """The local Prefect server that keeps this home's run history (127.0.0.1 only)."""


@server.command("start")
@json_option("the server state")
@click.pass_context
def server_start(ctx: click.Context, as_json: bool) -> None:
    """Start this home's server now (any command that runs a flow starts it on demand).

    Example: voxledger server start
    """
    from voxledger.hosting.runtime import offline_defaults
    from voxledger.hosting.server import ensure_server, read_state

    offline_defaults()
    root = open_home(ctx).root
    url = ensure_server(root)
    state = read_state(root)
    if as_json:
        emit_json({"api_url": url, "pid": state.pid if state else None})
    else:
        click.echo(f"Prefect server for {root}: {url} (pid {state.pid if state else '?'})")


@server.command("status")
@json_option("the server state")
@click.pass_context
def server_status(ctx: click.Context, as_json: bool) -> None:
    """Say whether this home's server runs, where, and since when.

    Example: voxledger server status --json
    """
    from voxledger.hosting.server import healthy, read_state

    state = read_state(open_home(ctx).root)
    ok = state is not None and healthy(state.api_url)
    if as_json:
        emit_json({"running": ok, **(state.__dict__ if state else {})})
    elif ok and state is not None:
        click.echo(f"running: {state.api_url} (pid {state.pid})")
    else:
        click.echo("not running (the next command that runs a flow starts it)")


@server.command("stop")
@click.pass_context
def server_stop(ctx: click.Context) -> None:
    """Stop this home's server (it also stops itself after an hour without activity).

    Example: voxledger server stop
    """
    from voxledger.hosting.server import stop_server

    click.echo("stopped" if stop_server(open_home(ctx).root) else "no server was running")


COMMANDS = (server,)
