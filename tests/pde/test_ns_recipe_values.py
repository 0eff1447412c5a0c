"""A Navier-Stokes recipe's nu and t_final are refused naming the value that is wrong (one message for both before,
"nu and t_final must be > 0", which --t-final nan also got)."""

import pytest

from opformer.cli import main


@pytest.mark.parametrize("flag,value,shown", [("--t-final", "nan", "t_final must be a finite number > 0, found nan"),
                                              ("--t-final", "inf", "t_final must be a finite number > 0, found inf"),
                                              ("--nu", "-1", "nu must be a finite number > 0, found -1.0"),
                                              ("--nu", "0", "nu must be a finite number > 0, found 0.0")])
def test_the_wrong_value_is_named(tmp_path, capsys, flag, value, shown):
    out = tmp_path / "ns.h5"
    assert main(["data", "navier-stokes", "--samples", "2", "--resolution", "8", flag, value, "--out", str(out)]) == 2
    assert shown in capsys.readouterr().err
    assert not out.exists()
