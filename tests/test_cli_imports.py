"""The help of the commands comes without importing torch (seconds saved on every `opformer ... --help`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from opformer.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("TORCH-LOADED" if "torch" in sys.modules else "TORCH-NOT-LOADED", file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--help"], ["eval", "--help"], ["predict", "--help"], ["data", "--help"],
                                  ["bench", "attention", "--help"], ["rollout", "--help"]])
def test_help_does_not_import_torch(args):
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    assert "usage:" in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == "TORCH-NOT-LOADED"


def test_bench_package_names_still_resolve():
    import opformer.bench as bench

    for name in bench.__all__:
        assert getattr(bench, name) is not None
    with pytest.raises(AttributeError):
        bench.no_such_name  # noqa: B018


def test_argument_errors_are_one_line_pointing_to_help(capsys):
    """A bad flag value or a missing argument: one line naming the command, not argparse's usage block."""
    from opformer.cli import main

    for argv, line in ((["rollout", "m", "--data", "d", "--mode", "jump"],
                        "opformer rollout: error: argument --mode: invalid choice: 'jump' (choose from 'direct', "
                        "'autoregressive', 'mixed') (`opformer rollout --help` lists the options)"),
                       (["data", "darcy", "--samples", "x"],
                        "opformer data darcy: error: argument --samples: invalid int value: 'x' (`opformer data darcy "
                        "--help` lists the options)"),
                       (["eval", "m", "--nope"],
                        "opformer eval: error: unrecognized arguments: --nope (`opformer eval --help` lists the "
                        "options)"),
                       (["data", "info", "f.h5", "--nope"],
                        "opformer data info: error: unrecognized arguments: --nope (`opformer data info --help` "
                        "lists the options)")):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        assert capsys.readouterr().err == line + "\n"
