import pytest
import torch


@pytest.fixture()
def one_thread():
    """Small tensors on shared cores: one thread is faster and makes the runs reproducible."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def relative_l2(pred, target):
    """Mean over the batch of ||pred - target|| / ||target|| (the paper's metric), a 0-d tensor."""
    return ((pred - target).flatten(1).norm(dim=1) / target.flatten(1).norm(dim=1)).mean()
