"""The typer application, its error handling and the console-script entry point."""

from __future__ import annotations

import contextlib
import functools
import logging
import sqlite3
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn

from langchain_reflective.errors import ReflectiveError

with contextlib.suppress(ImportError):  # without the cli extra, run() says which to install
    import typer


from langchain_reflective.cli._common import (
    _MISSING,
    _STATE,
    EXIT_CODES,
    INSTALL_HINT,
    CLIError,
    _console,
    _one_line,
    _visible,
)

INTERRUPTED = 130
"""Exit status of an interrupted command (Ctrl-C), as shells report a SIGINT."""

# -- the app -------------------------------------------------------------------------------------


def _print_version(value: bool) -> None:
    if value:
        from langchain_reflective import __version__

        _console().print(f"langchain-reflective {__version__}")
        raise typer.Exit(0)


def _root(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks and debug logs on errors.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            is_eager=True,
            callback=lambda value: _print_version(value),
        ),
    ] = False,
) -> None:
    """Long-term memory that reflects, for LangChain and LangGraph agents.

    Try 'reflective demo' (offline, a few minutes on a laptop CPU).
    """
    _STATE["debug"] = debug
    if debug:
        logging.getLogger("langchain_reflective").setLevel(logging.DEBUG)


def _build_app() -> typer.Typer:
    application = typer.Typer(
        name="reflective",
        help=_root.__doc__,
        epilog=EXIT_CODES,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    from langchain_reflective.cli.demo import demo
    from langchain_reflective.cli.files import export, import_, inspect

    application.callback()(_root)
    application.command("demo")(demo)
    application.command("inspect")(inspect)
    application.command("export")(export)
    application.command("import")(import_)
    from langchain_reflective.reflexion.cli import build_reflexion_app

    application.add_typer(build_reflexion_app(), name="reflexion")
    _report_interruptions(application)
    return application


def _report_interruptions(application: typer.Typer) -> None:
    """Make every command of ``application`` (and of its groups) report a Ctrl-C with the notes
    it carries (e.g. what an import wrote before it), as :func:`run` reports errors.

    typer turns a ``KeyboardInterrupt`` raised in a command into a bare exit status 130, so
    :func:`run` would only know that the command was interrupted. Wrapped here, where commands
    are registered, rather than in each command."""
    for info in application.registered_commands:
        if info.callback is not None:
            info.callback = _interruptible(info.callback)
    for group in application.registered_groups:
        if group.typer_instance is not None:
            _report_interruptions(group.typer_instance)


def _interruptible(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command``, raising a ``KeyboardInterrupt`` as a :class:`CLIError` with its notes."""

    @functools.wraps(command)  # (typer reads the parameters through __wrapped__)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt as exc:
            interrupted = CLIError("interrupted", code=INTERRUPTED)
            interrupted.__notes__ = list(getattr(exc, "__notes__", None) or ())
            raise interrupted from exc

    return wrapper


if _MISSING is None:
    app = _build_app()


@contextmanager
def _quiet_logs() -> Iterator[None]:
    """Route warnings of libraries to nothing: the CLI prints what matters itself."""
    root, ours = logging.getLogger(), logging.getLogger("langchain_reflective")
    handler, previous = logging.NullHandler(), ours.level
    root.addHandler(handler)  # no "last resort" printing of library warnings to stderr
    if not _STATE["debug"]:
        ours.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.removeHandler(handler)
        ours.setLevel(previous)


def _parser_errors() -> tuple[type[Exception], ...]:
    """Command-line parsing errors: typer's own (typer >= 0.23 vendors click) and click's."""
    errors: list[type[Exception]] = [typer.exceptions.TyperException]
    try:
        import click

        errors.append(click.ClickException)
    except ImportError:  # pragma: no cover - typer without click
        pass
    return tuple(errors)


def _abort_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [typer.Abort, KeyboardInterrupt]
    try:
        import click

        errors.append(click.Abort)
    except ImportError:  # pragma: no cover - typer without click
        pass
    return tuple(errors)


def _parser_error(exc: Exception) -> int:
    """Print a parsing error as one line (or the help when no command was given)."""
    ctx = getattr(exc, "ctx", None)
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "NoArgsIsHelpError" in names and ctx is not None:
        # the error's message is the help: rich help is printed when it is made (its message
        # is then empty), plain help is only returned -- printed here, once either way
        help_text = getattr(exc, "message", "")
        if help_text:
            print(help_text)
        return 2
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    if "UsageError" in names:
        where = getattr(ctx, "command_path", None) or "reflective"
        message = f"{message} (see '{where} --help')"
    _error(message)
    code = getattr(exc, "exit_code", 2)
    return code if isinstance(code, int) and code else 2


def _error(message: str) -> None:
    print(f"error: {_visible(_one_line(message))}", file=sys.stderr, flush=True)


def _described(exc: BaseException, message: str | None = None) -> str:
    """``message`` (default: the exception's text) with the notes the library added to the
    exception (e.g. how many records an import wrote before it failed), on the same line."""
    notes = [str(note) for note in getattr(exc, "__notes__", None) or () if str(note).strip()]
    return " -- ".join([str(exc) if message is None else message, *notes])


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Errors a user can fix are printed as one line on stderr; ``--debug`` adds the traceback.
    """
    if _MISSING is not None:
        _error(f"the reflective command needs the cli extra ({_MISSING.name}): {INSTALL_HINT}")
        return 1
    args = list(sys.argv[1:] if argv is None else argv) or ["--help"]
    _STATE["debug"] = "--debug" in args
    command = typer.main.get_command(app)
    try:
        with _quiet_logs():
            result = command.main(args=args, prog_name="reflective", standalone_mode=False)
    except _parser_errors() as exc:
        return _parser_error(exc)
    except _abort_errors():
        _error("interrupted")
        return INTERRUPTED
    except CLIError as exc:
        if _STATE["debug"]:
            traceback.print_exc()
        _error(_described(exc))
        return exc.code
    except sqlite3.Error as exc:
        if _STATE["debug"]:
            traceback.print_exc()
        _error(
            _described(
                exc, f"the memory file could not be read or written (corrupt or truncated?): {exc}"
            )
        )
        return 1
    except (ReflectiveError, ImportError, OSError) as exc:
        if _STATE["debug"]:
            traceback.print_exc()
        _error(_described(exc, str(exc) or type(exc).__name__))
        return 1
    except Exception as exc:
        if _STATE["debug"]:
            traceback.print_exc()
        if type(exc).__module__.split(".")[0] in {"openai", "httpx", "httpcore"}:
            _error(_described(exc, f"the model API call failed ({type(exc).__name__}): {exc}"))
        else:
            _error(
                _described(
                    exc,
                    f"unexpected {type(exc).__name__}: {exc} (run with --debug for the "
                    "traceback, and please report it)",
                )
            )
        return 1
    if result == INTERRUPTED:
        # typer turns a Ctrl-C outside the commands (in the root callback, while parsing) into
        # exit status 130 itself, so the handlers above never saw it: say it in the same line
        _error("interrupted")
        return INTERRUPTED
    return result if isinstance(result, int) else 0


def main() -> NoReturn:
    """Entry point of the ``reflective`` console script."""
    sys.exit(run())
