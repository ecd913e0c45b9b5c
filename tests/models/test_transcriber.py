"""The Transcriber: frame grouping, the loss against a plain cross-entropy, cached greedy decoding against a naive loop."""

import pytest
import torch
import torch.nn.functional as F

from multimodal.models.config import TranscriberConfig
from multimodal.models.transcriber import Transcriber


def _model(**overrides) -> Transcriber:
    torch.manual_seed(0)
    config = TranscriberConfig.from_preset("tiny", n_mels=8, frame_stack=3, vocab_size=20, **overrides)
    return Transcriber(config).eval()


def test_encode_groups_frames_and_pads_the_last_group_with_silence():
    model = _model()
    spectrograms = torch.randn(2, 8, 10)  # 10 frames -> 4 groups of 3, the last padded with 2 frames
    assert model.encode(spectrograms).shape == (2, 4, 32)
    padded = torch.cat([spectrograms, spectrograms.amin(dim=(1, 2), keepdim=True).expand(-1, 8, 2)], dim=-1)
    torch.testing.assert_close(model.encode(spectrograms), model.encode(padded))
    with pytest.raises(ValueError, match="n_mels=8"):
        model.encode(torch.randn(2, 7, 10))


def test_loss_is_the_cross_entropy_of_the_next_ids_ignoring_padding():
    model = _model()
    spectrograms = torch.randn(2, 8, 12)
    ids = torch.tensor([[1, 5, 6, 7, 2], [1, 9, 2, 0, 0]])
    logits = model(ids[:, :-1], model.encode(spectrograms), key_padding_mask=ids[:, :-1] == 0)
    targets = ids[:, 1:]
    keep = targets != 0
    expected = F.cross_entropy(logits[keep], targets[keep])
    torch.testing.assert_close(model.loss(spectrograms, ids, pad_id=0), expected)
    torch.testing.assert_close(model.loss(spectrograms, ids, pad_id=0, reduction="sum"), expected * keep.sum())


def test_cached_greedy_decoding_equals_recomputing_every_step():
    model = _model(num_layers=2)
    spectrograms = torch.randn(3, 8, 15)
    decoded = model.greedy(spectrograms, bos_id=1, eos_id=2, max_tokens=12)
    context = model.encode(spectrograms)
    for row in range(3):
        ids = [1]
        with torch.no_grad():
            for _ in range(12):
                step = int(model(torch.tensor([ids]), context[row : row + 1])[0, -1].argmax())
                if step == 2:
                    break
                ids.append(step)
        assert decoded[row] == ids[1:]
