"""What every command module shares: the home, JSON output, running a flow, resolving ids, plan paths.

Command modules import from here and from nothing else in ``voxledger.cli``; the package's
``__init__`` attaches their commands to ``main``. So any command module imports first, alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from rich.console import Console

F = TypeVar("F", bound=Callable[..., Any])

flows_may_use_runner = False
"""Set by the ``voxledger`` program's entry point (``voxledger.cli.program``) only: a command invoked
in-process (click's test runner, a script calling ``main``) runs its flows in its own process."""


def plans_dir() -> Path:
    """The bundled plans (package data ``voxledger/plans``), wherever the package is installed."""
    return Path(str(resources.files("voxledger") / "plans"))


def open_home(ctx: click.Context, *, existing: bool = False) -> Any:
    """The Home for this invocation (created on first use). ``existing``: the command only reads
    the home, so a home folder that does not exist is refused (HomeNotFoundError naming it), not
    created empty: a mistyped ``--home`` would otherwise answer every question with "nothing"."""
    from voxledger.stores.home import Home, resolve_home

    obj = ctx.find_root().obj
    if existing and "home_obj" not in obj and not (where := resolve_home(obj["home"])).is_dir():
        from voxledger.schemas.errors import HomeNotFoundError

        raise HomeNotFoundError(
            f"no voxledger home at {where}: {'it is a file, not a folder' if where.exists() else 'the folder does not exist'}, "
            "so nothing was recorded there. Point --home (or VOXLEDGER_HOME; default ./.voxledger) at the home a pipeline ran "
            "in; a new home is made by the first command that records work (e.g. `voxledger demo run`, `voxledger audit`)"
        )
    if "home_obj" not in obj:
        obj["home_obj"] = Home(obj["home"], lock_timeout_s=obj["lock_timeout"])
    return obj["home_obj"]


def home_ref(ctx: click.Context) -> Any:
    """The typed reference to this invocation's home (its --lock-timeout and read-only setting included)."""
    from voxledger.stores.home import HomeRef

    return HomeRef.of(open_home(ctx))


def run_flow(ctx: click.Context, flow: str, *args: Any, quiet: bool = False, **kwargs: Any) -> Any:
    """Run a Prefect flow (``"voxledger.flows.<module>:<name>"``) for this home with a live
    progress line.

    The flow's first argument is this invocation's ``HomeRef`` (given here, never by the caller),
    so ``--home``, ``--lock-timeout`` and the read-only setting reach every stage (and a worker).
    Every command that does work goes through here, so all of it shows in Prefect's run history.
    The flow runs in the home's resident runner when one is warm (``hosting.runner``: Prefect and
    the flow's modules already imported), else in this process (``hosting.runtime.run_here``).
    """
    from voxledger.hosting.runtime import run_here

    home = open_home(ctx)
    console = cli_console(stderr=True)
    live = console.is_terminal and not quiet
    with console.status("starting", spinner="dots") if live else nullcontext() as status, ProgressLines(not quiet and not live) as lines:

        def show(message: str) -> None:
            if status is not None:
                status.update(message)
            lines.show(message)

        show("connecting to the Prefect server")
        if flows_may_use_runner:
            from voxledger.hosting import runner

            if runner.usable(home.root):
                served, out = runner.delegate(home.root, flow, (home_ref(ctx), *args), kwargs, show)
                if served:
                    return out
        return run_here(home.root, flow, (home_ref(ctx), *args), kwargs, show)


@contextmanager
def complete_hints(corpus: Path, eval_plan: Path | None) -> Iterator[None]:
    """Fill the placeholders a stage's error hint carries (``--corpus CORPUS``, ``eval run EVAL_PLAN``)
    with what this command was given, so each ``next:`` line works when pasted. A stage's verdict
    sees only its receipt; the command knows the corpus and the plans beside it."""
    from voxledger.schemas.errors import VoxledgerError

    try:
        yield
    except VoxledgerError as exc:
        text = str(exc)
        filled = text.replace("--corpus CORPUS", f"--corpus {corpus}")
        if eval_plan is not None and eval_plan.is_file():
            filled = filled.replace("eval run EVAL_PLAN", f"eval run {eval_plan}")
        if filled != text:
            exc.args = (filled, *exc.args[1:])
        raise


def cli_console(stderr: bool = False) -> Console:
    """A rich console for command output. On a terminal it is the usual one; piped or redirected,
    it never truncates a table cell (``…``) or wraps a line, so ``voxledger ... | cat`` and a log
    file hold every character (``--json`` is there for scripts)."""
    import sys

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=100_000, soft_wrap=True, no_color=True, highlight=False)


class ProgressLines:
    """Progress as plain lines on stderr when it is not a terminal (a log file, a pipe, CI), each
    with the time since the command started: every ``stage ...`` line, the first line of each new
    phase (its first word changes: ``storing``, ``training:``, ``measuring``), and otherwise at most
    one line every ``every_s`` seconds.

    Used as a context manager it also keeps a heartbeat: when no line has been printed for
    ``every_s`` seconds (a model loading, a long step, a slow set-up), the newest message is printed
    again with ``still:`` and how long it has been current, so a log never goes quiet for longer.
    """

    def __init__(self, enabled: bool, every_s: float = 10.0) -> None:
        import threading
        import time

        self.enabled, self.every_s, self.t0 = enabled, every_s, time.monotonic()
        self.last, self.phase = float("-inf"), ""
        self.latest, self.latest_at, self.printed = "", self.t0, ""
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._beat: threading.Thread | None = None

    def __enter__(self) -> ProgressLines:
        import threading

        if self.enabled:
            self._beat = threading.Thread(target=self._heartbeat, name="voxledger-progress", daemon=True)
            self._beat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._beat is not None:
            self._beat.join(timeout=1.0)

    def show(self, message: str) -> None:
        import time

        now, phase = time.monotonic(), message.split(" ", 1)[0]
        with self._lock:
            if message != self.latest:
                self.latest, self.latest_at = message, now
            if not self.enabled or (phase == self.phase and phase != "stage" and now - self.last < self.every_s):
                return
            self._print(now, message)
            self.phase = phase

    def _print(self, now: float, message: str) -> None:
        self.last, self.printed = now, message
        click.echo(f"[{now - self.t0:7.1f} s] {message}", err=True)

    def _heartbeat(self) -> None:
        import time

        tick = min(1.0, self.every_s / 4)
        while not self._done.wait(tick):
            with self._lock:
                now = time.monotonic()
                if not self.latest or now - self.last < self.every_s:
                    continue
                if self.latest != self.printed:
                    self._print(now, self.latest)
                else:
                    self._print(now, f"still: {self.latest} ({now - self.latest_at:.0f} s)")
                    self.printed = self.latest


def emit_json(value: Any) -> None:
    """Print JSON for scripts (stable key order)."""
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


def resolve_node(ctx: click.Context, ref: str) -> str:
    """The full digest of a receipt or artifact in the catalog named whole or by a unique prefix (>= 8 hex).

    Raises CatalogError naming ``ref`` when it is too short, unknown or ambiguous.
    """
    from voxledger.stores.lineage import resolve_node as _resolve

    with open_home(ctx, existing=True).catalog.connect(read_only=True) as con:
        return _resolve(con, ref)


def resolve_receipt(ctx: click.Context, ref: str, *kinds: str) -> str:
    """The full id of a receipt named whole or by a unique prefix, optionally of one of ``kinds``.

    Raises ReceiptError when ``ref`` names an artifact (bytes, not a receipt) or a receipt of
    another kind, naming what it is and the command that finds the right id.
    """
    from voxledger.schemas.errors import CatalogError, ReceiptError
    from voxledger.stores.lineage import receipt_kind
    from voxledger.stores.lineage import resolve_node as _resolve

    home = open_home(ctx, existing=True)
    with home.catalog.connect(read_only=True) as con:
        try:
            node = _resolve(con, ref)
        except CatalogError:
            if len(ref.strip()) == 64 and home.blobs.has(ref.strip().lower()):
                raise ReceiptError(f"{ref!r} names bytes in the store (a file or part of a tree), not a receipt") from None
            raise
        kind = receipt_kind(con, node)
    if kind is None:
        raise ReceiptError(
            f"{ref!r} names an artifact ({node[:16]}...), not a receipt; `voxledger lineage {node[:12]}` shows the receipt that produced it"
        )
    if kinds and kind not in kinds:
        raise ReceiptError(
            f"{ref!r} is a {kind} receipt, not {' or '.join(kinds)}; "
            f"`voxledger query \"SELECT receipt_sha256 FROM receipts WHERE kind = '{kinds[0]}'\"` lists those"
        )
    return node


def json_option(what: str = "the result") -> Callable[[F], F]:
    """The shared ``--json`` flag: print ``what`` as JSON for scripts instead of tables and lines."""
    return click.option("--json", "as_json", is_flag=True, help=f"Print {what} as JSON (for scripts) instead of a table.")


def interval_cell(iv: dict[str, Any] | None, signed: bool = False) -> str:
    """An interval cell: mean [low, high], or the mean and why there is no interval."""
    if iv is None:
        return "-"
    f = "{:+.3f}" if signed else "{:.3f}"
    if iv.get("low") is None or iv.get("high") is None:
        return f"{f.format(iv['mean'])} [no CI]"
    return f"{f.format(iv['mean'])} [{f.format(iv['low'])}, {f.format(iv['high'])}]"


def print_stages(stages: Any) -> None:
    """The stage table of a pipeline run."""
    from rich.table import Table

    table = Table("stage", "status", "cached", "wall s", "receipt", title="pipeline")
    for s in stages:
        table.add_row(s.stage, s.status, "yes" if s.cached else "no", f"{s.wall_s:.1f}", (s.receipt_id or "-")[:16])
    cli_console().print(table)


def stage_command(row: Any) -> click.Command:
    """``voxledger <noun>`` for a stage-table row whose noun has no command module (a stage added as
    docs/extending.md shows): PLAN when the stage takes a plan, one ``--option`` per input of its
    module's ``run`` (required unless ``run`` gives a default), and its summary line when it ends."""
    import importlib
    import inspect
    import typing

    module = importlib.import_module(row.module)
    hints = typing.get_type_hints(module.run)
    params: list[click.Parameter] = []
    names: list[str] = []
    for p in inspect.signature(module.run).parameters.values():
        if p.name in ("home", "plan", "flow"):
            continue
        types: dict[Any, click.ParamType[Any]] = {int: click.INT, float: click.FLOAT, bool: click.BOOL}
        click_type = types.get(hints.get(p.name), click.STRING)
        required = p.default is inspect.Parameter.empty
        params.append(
            click.Option(
                [f"--{p.name.replace('_', '-')}", p.name], type=click_type, required=required, default=None if required else p.default
            )
        )
        names.append(p.name)
    if row.plan_model is not None:
        params.insert(0, click.Argument(["plan"], type=click.Path(exists=True, dir_okay=False, path_type=Path)))
    params.append(
        click.Option(["--json", "as_json"], is_flag=True, help="Print the receipt id, whether it was cached and the summary as JSON.")
    )

    def callback(plan: Path | None = None, as_json: bool = False, **inputs: Any) -> None:
        ctx = click.get_current_context()
        given = {k: (str(Path(v).absolute()) if k == "corpus" else v) for k, v in inputs.items()}
        if plan is not None:
            given["plan"] = str(plan.absolute())
        out = run_flow(ctx, row.flow, quiet=as_json, **given)
        line = module.summary(out.receipt)
        if as_json:
            emit_json({"stage": row.name, "receipt": out.receipt_id, "cached": out.cached, "summary": line})
            return
        click.echo(f"{row.name}: {line}{' [cached]' if out.cached else ''}; receipt {out.receipt_id}")

    doc = (module.__doc__ or row.name).strip().splitlines()[0]
    example = f"voxledger {row.cli}{' PLAN' if row.plan_model else ''}" + "".join(f" --{n.replace('_', '-')} VALUE" for n in names)
    return click.Command(row.cli, callback=callback, params=params, help=f"{doc}\n\nExample: {example}")
