"""Helpers shared by the model tests."""


def relative_l2(pred, target):
    """Mean over the batch of ||pred - target|| / ||target|| (the paper's metric), a 0-d tensor."""
    return ((pred - target).flatten(1).norm(dim=1) / target.flatten(1).norm(dim=1)).mean()
