"""snapshots.png shows the last asked time when a rollout goes beyond the file (it showed only the times with a
truth, so a rollout past the data never showed where it ended)."""

from opformer.train.rollout import _shown_frames


def test_beyond_the_file_the_last_time_is_shown():
    times = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0]
    truth_idx = [0, 1, 2, 3, 4, None, None]
    assert _shown_frames(times, truth_idx) == [1, 3, 4, 6]  # three of t = 0.5..2 with a truth, then t = 4


def test_within_the_file_up_to_four_times_with_a_truth_spread_out():
    times = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    assert _shown_frames(times, list(range(7))) == [1, 3, 4, 6]
    assert _shown_frames([0.0, 1.0], [0, 1]) == [1]


def test_without_any_truth_the_predictions_alone():
    assert _shown_frames([1.0, 2.0, 3.0], [None, None, None]) == [0, 1, 2]


def test_times_between_snapshots_are_not_taken_for_times_beyond():
    times = [0.25, 0.5, 0.75, 1.0]
    truth_idx = [None, 1, None, 2]  # 0.25 and 0.75 between the stored snapshots
    assert _shown_frames(times, truth_idx) == [1, 3]


def test_the_recorded_step_is_the_decimal_of_the_stored_times():
    """rollout.json's step, a difference of stored times, without binary noise (0.3999999999999999 was written)."""
    from opformer.train.rollout import _decimal

    assert _decimal(1.2 - 0.8) == 0.4 and _decimal(None) is None
    assert _decimal(1 / 3) == 0.333333333333 and _decimal(0.05) == 0.05
