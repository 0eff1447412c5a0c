import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """The solvers' FFTs are small: one thread is faster than several, and the test machine is shared."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
