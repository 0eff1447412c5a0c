"""Reading a run's metric logs: a damaged cell is named with its file, line and column (a bare "could not convert
string to float" before), and a file named like a part but not numbered (metrics-old.csv) is not taken for one (it
raised a ValueError from int())."""

import pytest

from opformer.train.plots import read_run_history


def test_a_cell_that_is_no_number_is_named(tmp_path):
    (tmp_path / "metrics.csv").write_text("epoch,step,val_rel_l2\n0,10,0.5\n1,20,oops\n")
    with pytest.raises(ValueError, match=r"metrics.csv: line 3: val_rel_l2 = 'oops' \(epoch '1'\) is not a number$"):
        read_run_history(tmp_path)


def test_only_numbered_parts_are_read_in_order(tmp_path):
    (tmp_path / "metrics-0.csv").write_text("epoch,step,val_rel_l2\n0,10,0.5\n1,20,0.4\n")
    (tmp_path / "metrics-old.csv").write_text("not a log\n")
    (tmp_path / "metrics.csv").write_text("epoch,step,val_rel_l2\n1,20,0.3\n2,30,0.2\n")
    assert read_run_history(tmp_path) == {"val_rel_l2": [(0, 0.5), (1, 0.3), (2, 0.2)]}
