"""The ``voxledger`` command: a thin click layer over flows (work) and stores (queries).

Library errors (``VoxledgerError``) become ``ClickException`` here, at one boundary, so every
failure exits non-zero with a one-paragraph message and no traceback. Command modules import only
``voxledger.cli.common`` and list their commands in ``COMMANDS``; ``main`` loads a module when one
of its commands is asked for (``COMMAND_MODULES``).
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from typing import Any, NoReturn

import click

from voxledger.schemas.errors import InterruptedRunError, VoxledgerError
from voxledger.settings import load_settings

COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "alias": ("alias",),
    "audit": ("audit",),
    "backends": ("cosyvoice3",),
    "base": ("base",),
    "bench": ("bench",),
    "capabilities": ("capabilities",),
    "catalog": ("catalog",),
    "checkpoints": ("checkpoints",),
    "corpus": ("corpus",),
    "dashboard": ("dashboard",),
    "demo": ("demo",),
    "deploy": ("deploy",),
    "equivalence": ("equivalence",),
    "eval": ("eval",),
    "export": ("export",),
    "init": ("init",),
    "lineage": ("lineage",),
    "packets": ("packets",),
    "package": ("package",),
    "pipeline": ("pipeline",),
    "plan": ("plan",),
    "promote": ("promote",),
    "provenance": ("provenance",),
    "query": ("query",),
    "ratings": ("ratings",),
    "receipt": ("receipt",),
    "reproduce": ("reproduce",),
    "serve": ("serve",),
    "server": ("server",),
    "store": ("store",),
    "sweep": ("sweep",),
    "train": ("train",),
}
"""Command module (``voxledger.cli.<module>``) -> the names of the commands in its ``COMMANDS``.
A command's module is imported only when that command runs (or help lists every command), so a
read command pays for its own imports, not for every other command's; a test checks this map
against the modules."""

_MODULE_OF = {name: module for module, names in COMMAND_MODULES.items() for name in names}


def _table_nouns() -> dict[str, Any]:
    """Stage-table rows whose one-word CLI noun has no command module: their command is made from the
    row (``cli.common.stage_command``), so a stage added to the table has its command."""
    from voxledger.schemas.stages import STAGE_ROWS

    return {r.cli: r for r in STAGE_ROWS if " " not in r.cli and r.cli not in _MODULE_OF}


class Boundary(click.Group):
    """A click group that turns library errors into clean, non-zero exits, and loads each command's
    module on first use (``COMMAND_MODULES``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*_MODULE_OF, *_table_nouns(), *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _MODULE_OF:
            import importlib

            module = importlib.import_module(f"voxledger.cli.{_MODULE_OF[cmd_name]}")
            for command in module.COMMANDS:
                self.add_command(command)
        if cmd_name not in self.commands and cmd_name in _table_nouns():
            from voxledger.cli.common import stage_command

            self.add_command(stage_command(_table_nouns()[cmd_name]))
        return self.commands.get(cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (InterruptedRunError, KeyboardInterrupt) as exc:
            # Ctrl-C: one line naming what was recorded (a run that had started leaves a failed receipt), exit 130
            _interrupted(str(exc) if isinstance(exc, InterruptedRunError) else "nothing recorded was lost (bytes first, receipts last)")
        except VoxledgerError as exc:
            raise click.ClickException(bounded(f"{type(exc).__name__}: {exc}")) from exc
        except click.ClickException as exc:  # a usage error quotes the value given: a huge one is cut
            # click marks ``message`` Final; replacing the exception would lose the usage lines it prints
            exc.message = bounded(exc.message)  # type: ignore[misc]
            raise
        except (click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001  (the one boundary: a defect still ends in one line)
            if _INTERRUPTED.is_set():
                # a Ctrl-C that Python turned into another error on its way (one landing inside a C extension's
                # import surfaces as "ImportError: initialization failed"): still a Ctrl-C, never a defect
                _interrupted(f"nothing recorded was lost (bytes first, receipts last); it surfaced as {type(exc).__name__}: {exc}")
            if isinstance(exc, RecursionError):  # an input nested past what Python follows, met where no reader checked it
                raise click.ClickException(
                    "input nested too deeply to read (RecursionError): no voxledger plan, receipt or manifest nests like that; check the file"
                ) from exc
            raise click.ClickException(bounded(_environment_message(ctx, exc) or _defect_message(exc))) from exc


def _interrupted(said: str) -> NoReturn:
    """Ctrl-C's one line, and exit 130 now. Everything this process recorded is on disk (atomic writes,
    catalog connections closed): Prefect's exit-time log shipping and thread joins would keep a Ctrl-C
    waiting for many seconds."""
    click.echo(bounded(f"Interrupted: {said}"), err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)


MAX_MESSAGE_LINES = 40
MAX_LINE_CHARS = 600


def bounded(message: str) -> str:
    """An error message cut to ``MAX_MESSAGE_LINES`` lines of ``MAX_LINE_CHARS`` characters, saying what
    was cut: a message quoting a hostile input (a 20 MB line, a million problems) stays short."""
    lines = message.splitlines() or [""]
    shown = [_cut_line(line) for line in lines[:MAX_MESSAGE_LINES]]
    if len(lines) > MAX_MESSAGE_LINES:
        shown.append(f"... and {len(lines) - MAX_MESSAGE_LINES} more line(s)")
    return "\n".join(shown)


def _cut_line(line: str) -> str:
    """A long line's head and tail (where the fix usually is), the middle replaced by its size."""
    if len(line) <= MAX_LINE_CHARS:
        return line
    head, tail = MAX_LINE_CHARS * 2 // 3, MAX_LINE_CHARS // 3
    return f"{line[:head]} [... {len(line) - head - tail:,} characters cut ...] {line[-tail:]}"


def _defect_message(exc: BaseException) -> str:
    return f"unexpected {getattr(exc, 'original_type', type(exc).__name__)}: {exc} (a defect in voxledger; the run's receipt and Prefect's logs keep the details)"


def _lock_timeout(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """``--lock-timeout``: a finite number of seconds, more than 0 and at most a week."""
    import math

    if not math.isfinite(value) or not 0 < value <= 7 * 24 * 3600:
        raise click.BadParameter(f"{value!r} is not a wait in seconds: give a finite number above 0 and at most 604800 (a week)")
    return value


def _environment_message(ctx: click.Context, exc: BaseException) -> str | None:
    """A full disk or a read-only file system, said plainly: what happened, what is safe, what to do."""
    chain = [exc, *(_causes(exc))]
    text = " ".join(str(e) for e in chain).lower()
    home = ctx.obj.get("home_obj") if isinstance(ctx.obj, dict) else None
    where = f" ({home.root})" if home is not None else ""
    if any(isinstance(e, OSError) and e.errno == errno.ENOSPC for e in chain) or "disk is full" in text or "no space left" in text:
        return (
            f"the disk is full{where}: the command stopped; the step it was in recorded nothing, and receipts recorded "
            "before it (a registered plan, earlier stages) stay complete. Nothing already recorded was lost "
            "(bytes are stored before receipts, and the catalog row is written last). Free space there "
            "(old checkpoints: `voxledger checkpoints prune --plan-out prune.json`; temporary files under <home>/store/tmp), "
            f"then run the command again. ({type(exc).__name__}: {exc})"
        )
    if any(isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM) for e in chain):
        return (
            f"cannot write {getattr(exc, 'filename', None) or 'a file'}: {exc.strerror if isinstance(exc, OSError) else exc}. "
            "Nothing recorded was changed. Read commands work on a read-only home; to record, use a writable --home."
        )
    return None


def _causes(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur = exc.__cause__ or exc.__context__
    while cur is not None and len(out) < 5:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


@click.group(cls=Boundary)
@click.version_option(None, "--version", package_name="voxledger", prog_name="voxledger", message="%(prog)s %(version)s")
@click.option(
    "--home",
    type=click.Path(file_okay=False),
    default=None,
    help="Home directory of the store and catalog (default $VOXLEDGER_HOME, else ./.voxledger).",
)
@click.option(
    "--lock-timeout",
    type=float,
    default=60.0,
    show_default=True,
    callback=_lock_timeout,
    help="Seconds to wait for another process holding the catalog (finite, above 0).",
)
@click.pass_context
def main(ctx: click.Context, home: str | None, lock_timeout: float) -> None:
    """voxledger: provable fine-tuning pipelines for text-to-speech.

    Example: voxledger --home ./.voxledger store verify
    """
    settings = load_settings()  # every VOXLEDGER_* variable checked here: a bad one stops any command in one line
    ctx.obj = {"home": home or (str(settings.home) if settings.home else None), "lock_timeout": lock_timeout}


def program() -> None:
    """The ``voxledger`` program (console script and ``python -m voxledger.cli``): ``main``, with flows
    handed to the home's resident runner when one is warm (``hosting.runner``)."""
    from voxledger.cli import common

    common.flows_may_use_runner = True
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _noting_interrupt)
    main()


_INTERRUPTED = threading.Event()


def _noting_interrupt(signum: int, frame: object) -> None:
    """Python's own Ctrl-C (KeyboardInterrupt), noted first, so the error boundary knows an error that
    follows a Ctrl-C is the Ctrl-C's doing."""
    _INTERRUPTED.set()
    raise KeyboardInterrupt


if __name__ == "__main__":
    program()
