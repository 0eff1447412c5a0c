"""The ``opformer`` command: parses and dispatches only; each sub-command lives with its package."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import __version__


class _OneLineParser(argparse.ArgumentParser):
    """argparse's errors in one line (a bad flag value, a missing argument) that points to ``--help``, instead of the
    usage block followed by the error; sub-command parsers inherit it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")


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
        args, extra = parser.parse_known_args(argv)
        if extra and not getattr(args, "accepts_extra", False):
            _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
        args.extra = extra
        return int(args.func(args) or 0)
    except BrokenPipeError:
        return closed_pipe_status()
    except KeyboardInterrupt:  # Ctrl-C while starting (importing torch), before a command handles it itself
        print("opformer: interrupted", file=sys.stderr)
        return 130


def _command_parser(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The parser of the sub-command (and sub-sub-command) that ``args`` ran, so that its errors name it."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if name is None or name not in subs[0].choices:
            return parser
        parser = subs[0].choices[name]


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
