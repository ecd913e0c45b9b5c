"""Stochastic depth and dropout: the layer against timm's ``DropPath``, the per-block rates, eval mode."""

from __future__ import annotations

import pytest
import torch

from multimodal.layers import Encoder, TransformerConfig
from multimodal.layers.drop_path import DropPath, drop_path_rates


def test_drop_path_rows_are_dropped_or_scaled_like_timm():
    timm_layers = pytest.importorskip("timm.layers")
    p, x = 0.3, torch.randn(4096, 5, 7)
    ours, reference = DropPath(p).train(), timm_layers.DropPath(p).train()
    torch.manual_seed(0)
    out = ours(x)
    torch.manual_seed(0)
    expected = reference(x)
    # Each sample: the whole branch zeroed, or the whole branch scaled by 1 / (1 - p).
    ratio = out / x
    dropped = (out == 0).flatten(1).all(dim=1)
    kept = torch.isclose(ratio, torch.full_like(ratio, 1 / (1 - p))).flatten(1).all(dim=1)
    assert torch.equal(dropped | kept, torch.ones_like(dropped))
    assert 0.25 < dropped.float().mean() < 0.35
    # Same expected value as timm (and as the input): the mean over samples of out / x is ~1.
    assert torch.allclose(ratio.mean(0), (expected / x).mean(0), atol=0.1)
    assert abs(ratio.mean().item() - 1.0) < 0.05
    # timm draws one Bernoulli per sample from the same generator, so the same seed gives the same rows.
    assert torch.equal(dropped, (expected == 0).flatten(1).all(dim=1))


def test_drop_path_is_identity_in_eval_and_rejects_bad_rates():
    x = torch.randn(8, 3)
    assert DropPath(0.5).eval()(x) is x
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        DropPath(1.0)
    with pytest.raises(ValueError, match="drop_path"):
        TransformerConfig(dim=16, num_heads=2, drop_path=-0.1)


def test_rates_rise_linearly_over_depth_as_timm():
    assert drop_path_rates(0.1, 1) == [0.0]
    assert drop_path_rates(0.2, 5) == pytest.approx(torch.linspace(0, 0.2, 5).tolist())
    config = TransformerConfig(dim=16, num_layers=3, num_heads=2, dropout=0.0, position="none", drop_path=0.2)
    blocks = Encoder(config).blocks
    assert isinstance(blocks[0].drop_path, torch.nn.Identity)  # rate 0: nothing to drop
    assert [block.drop_path.p for block in blocks[1:]] == pytest.approx([0.1, 0.2])


def test_encoder_eval_output_is_unchanged_and_training_drops_branches():
    torch.manual_seed(0)
    base = TransformerConfig(dim=16, num_layers=3, num_heads=2, dropout=0.0, position="none")
    plain = Encoder(base).eval()
    dropping = Encoder(TransformerConfig(**{**base.__dict__, "drop_path": 0.5}))
    dropping.load_state_dict(plain.state_dict())  # same tensors: drop path adds none
    x = torch.randn(64, 6, 16)
    assert torch.equal(dropping.eval()(x), plain(x))
    torch.manual_seed(1)
    trained = dropping.train()(x)
    assert not torch.allclose(trained, plain(x))
    # A sample whose four branches in blocks 1 and 2 were all dropped leaves the stack as
    # norm(block0(x)) exactly; the others are changed (kept branches are scaled by 1 / (1 - p)).
    skipped = dropping.norm(dropping.blocks[0](x))
    same = (trained - skipped).abs().flatten(1).amax(dim=1) < 1e-6
    assert 0 < same.sum() < 32  # chance (0.75 * 0.5) ** 2 = 0.14 per sample


def test_dropout_applies_in_training_only():
    # Eval mode skips the dropout modules (a decoding step calls none); training must still drop.
    torch.manual_seed(0)
    base = TransformerConfig(dim=16, num_layers=2, num_heads=2, dropout=0.0, position="none")
    plain = Encoder(base).eval()
    dropping = Encoder(TransformerConfig(**{**base.__dict__, "dropout": 0.5}))
    dropping.load_state_dict(plain.state_dict())
    x = torch.randn(8, 6, 16)
    assert torch.equal(dropping.eval()(x), plain(x))
    dropping.train()
    first, second = dropping(x), dropping(x)
    assert not torch.allclose(first, plain(x)) and not torch.allclose(first, second)
    # Each residual branch's dropout alone: a block's feed-forward output has zeros where dropout hit.
    block = dropping.blocks[0]
    torch.manual_seed(2)
    out = block.ff(x)
    assert 0.4 < (out == 0).float().mean() < 0.6
