"""The ``opformer`` command: parses and dispatches only; each sub-command lives with its package."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from . import __version__


class _OneLineParser(argparse.ArgumentParser):
    """argparse's errors in one line (a bad flag value, a missing argument) that points to ``--help``, instead of the
    usage block followed by the error; sub-command parsers inherit it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {_with_suggestion(message)} (`{self.prog} --help` lists the options)\n")


def _with_suggestion(message: str) -> str:
    """argparse's "invalid choice: 'trian' (choose from 'train', ...)" with the nearest choice added (Python 3.11's
    argparse suggests none); any other message as it is."""
    import difflib
    import re

    m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if m is None:
        return message
    choices = re.findall(r"'([^']*)'", m.group(2))
    near = difflib.get_close_matches(m.group(1), choices, n=1)
    return f"{message}; did you mean {near[0]!r}?" if near else message


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="opformer",
        description="Attention-based operator learning for PDEs (Fourier/Galerkin Transformers, FNO).",
    )
    parser.add_argument("--version", action="version", version=f"opformer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    importlib.import_module("opformer.train.cli").register(sub)
    data_sub = importlib.import_module("opformer.pde.cli").register(sub)
    importlib.import_module("opformer.train.cli").register_prepare(data_sub)  # needs the tasks, so not in pde
    importlib.import_module("opformer.train.rollout").register(sub)
    importlib.import_module("opformer.bench.cli").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(_joined_number_lists(sys.argv[1:] if argv is None else argv))
        if extra and not getattr(args, "accepts_extra", False):
            _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
        args.extra = extra
        return int(args.func(args) or 0)
    except BrokenPipeError:
        return closed_pipe_status()
    except (OSError, RuntimeError) as exc:  # a write that failed (a full disk, an I/O error): one line, no traceback
        line = write_error_line(exc)
        if line is None:
            raise
        print(f"opformer: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C while starting (importing torch), before a command handles it itself
        print("opformer: interrupted", file=sys.stderr)
        return 130


def _joined_number_lists(argv: list[str]) -> list[str]:
    """``--flag -1,2`` as ``--flag=-1,2``: argparse takes a value that starts with "-" and is no single number for an
    option ("expected one argument"), so a list of numbers whose first is negative (``--times -1,2``) reached the
    command's own check only as ``--flag=-1,2``."""
    import re

    out, i = [], 0
    while i < len(argv):
        flag = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if (flag.startswith("--") and "=" not in flag and "," in nxt
                and re.fullmatch(r"-[0-9.][0-9.eE+-]*(,[-+]?[0-9.][0-9.eE+-]*)+", nxt)):
            out.append(f"{flag}={nxt}")
            i += 2
            continue
        out.append(flag)
        i += 1
    return out


def _command_parser(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The parser of the sub-command (and sub-sub-command) that ``args`` ran, so that its errors name it."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if name is None or name not in subs[0].choices:
            return parser
        parser = subs[0].choices[name]


def write_error_line(exc: BaseException, last_checkpoint=None) -> str | None:
    """The error line for a write that the system refused (``exc``, or an exception it came from), or None: ``could
    not write FILE: REASON`` (the system's reason) for the files written atomically (checkpoints, models, metrics,
    plots), else, for a full disk, what is full and the file where known; a lack of space also says how to go on
    (``last_checkpoint``: a training's last.ckpt, None where the command is not known)."""
    import errno

    from .atomic import failed_write

    line, found = failed_write(exc), _no_space(exc)
    if found is None:
        return line
    reason, cause = found
    limit = getattr(cause, "errno", None) == errno.EFBIG or "ulimit" in reason
    if line is None:
        line = reason + (f" writing {cause.filename}" if getattr(cause, "filename", None) else "")
    elif limit:
        line += f" ({reason})"
    line += "; raise the limit" if limit else "; free some space"
    if last_checkpoint is None:
        return line + " and run the same command again (a training continues from its last checkpoint with --resume)"
    if Path(last_checkpoint).exists():
        return line + f" and continue from {last_checkpoint} with the same command and --resume"
    return line + " and run the same command again"


def _no_space(exc: BaseException):
    """(``"the disk is full"`` (or the quota / file size limit), the exception that says so) when ``exc`` or an
    exception it came from (torch.save turns the OSError into a RuntimeError) is a write refused for lack of space,
    else None."""
    from .pde.storage import no_space_reason

    seen = 0
    while exc is not None and seen < 8:
        reason = no_space_reason(exc)
        if reason is not None:
            return reason, exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def closed_pipe_status() -> int:
    """After a BrokenPipeError: the reader of the output went away (`opformer ... | head`). Stop quietly, as other
    command-line tools do: point stdout at /dev/null so that the flush at exit does not raise again, and return the
    status a shell reports for a command stopped by a closed pipe (128 + SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
