import pytest


@pytest.fixture(autouse=True)
def _solvers_on_one_thread(one_thread):
    """The solvers' FFTs are small: one thread is faster than several, and the test machine is shared."""
    yield
