"""The KV cache's row reorder (beam search) against a plain ``index_select`` of what was cached."""

import torch

from multimodal.layers import DecodingState


def _filled_state(batch: int, length: int) -> DecodingState:
    state = DecodingState(num_layers=2)
    for cache in state.layers:
        cache.append(torch.randn(batch, 2, length, 4), torch.randn(batch, 2, length, 4))  # buffer has spare room
    return state


def test_reorder_with_beam_parents_equals_index_select():
    torch.manual_seed(0)
    state = _filled_state(batch=6, length=5)
    before = [(cache.keys[:, :, :5].clone(), cache.values[:, :, :5].clone()) for cache in state.layers]
    parents = torch.tensor([0, 0, 3, 3, 4, 1])  # rows 1, 2, 5 move; a source row is also overwritten
    state.reorder(parents)
    for cache, (keys, values) in zip(state.layers, before, strict=True):
        assert torch.equal(cache.keys[:, :, :5], keys.index_select(0, parents))
        assert torch.equal(cache.values[:, :, :5], values.index_select(0, parents))
        # the cache keeps appending after a reorder
        new = torch.randn(6, 2, 1, 4)
        keys_now, _ = cache.append(new, new)
        assert keys_now.shape == (6, 2, 6, 4) and torch.equal(keys_now[:, :, 5:], new)


def test_reorder_to_fewer_rows_keeps_those_rows():
    state = _filled_state(batch=4, length=3)
    keys = state.layers[0].keys[:, :, :3].clone()
    state.reorder(torch.tensor([2, 0]))
    assert torch.equal(state.layers[0].keys[:, :, :3], keys[[2, 0]])
