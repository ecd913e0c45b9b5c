"""`multimodal convert` / `multimodal export` and the GPT-2 fine-tuning config, end to end on tiny models."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from safetensors.torch import load_file
from tiny_models import GPT2_VOCAB_SIZE, tiny_gpt2

from multimodal.convert.blocks import load_blocks
from multimodal.convert.gpt2 import load_gpt2
from multimodal.layers.lora import LoRALinear
from multimodal.models import CausalLM, CausalLMConfig
from tasks.checkpoint import load_task
from tasks.cli import COMMANDS, main

pytest.importorskip("transformers")
RUN = "outputs/text_lm_finetune/lightning_logs/version_0"


@pytest.fixture
def converted(tmp_path, monkeypatch):
    """A tiny random GPT-2 converted to outputs/gpt2_converted, where the fine-tuning config looks."""
    monkeypatch.chdir(tmp_path)
    reference = tiny_gpt2(tmp_path / "hf", max_seq_len=64)
    main(["convert", "gpt2", "--hf-dir", str(tmp_path / "hf"), "--out", "outputs/gpt2_converted"])
    return reference


def test_convert_gpt2_command_writes_the_export_and_tokenizer(converted, tmp_path, capsys):
    folder = tmp_path / "outputs/gpt2_converted"
    assert {p.name for p in folder.iterdir()} == {"blocks.safetensors", "config.json", "tokenizer.json"}
    main(["convert", "gpt2", "--hf-dir", str(tmp_path / "hf"), "--out", "again"])
    assert "use it with finetune.init_from: again" in capsys.readouterr().out
    assert "convert" in COMMANDS and "export" in COMMANDS


def test_finetune_config_trains_a_converted_gpt2_and_export_round_trips(converted, configs, tmp_path, caplog):
    args = [
        "--config",
        str(configs / "text_lm_finetune.yaml"),
        "--config",
        str(configs / "text_lm_finetune_tiny.yaml"),
    ]
    with caplog.at_level(logging.INFO, logger="pytorch_lightning"):
        main(["fit", *args])
    assert "frozen" in caplog.text and "loaded 29 pretrained tensors" in caplog.text
    last = tmp_path / RUN / "checkpoints" / "last.ckpt"
    task, tokenizer, _ = load_task(last)
    assert tokenizer.vocab_size == GPT2_VOCAB_SIZE == task.config.vocab_size
    # init_from loaded the converted weights and freeze kept the embeddings at exactly those values.
    converted_tensors = load_file(str(tmp_path / "outputs/gpt2_converted/blocks.safetensors"))
    torch.testing.assert_close(
        task.model.embedding.weight, converted_tensors["embedding.weight"], atol=0, rtol=0
    )
    assert not torch.equal(
        task.model.decoder.blocks[0].ff.up.weight, converted_tensors["stack.blocks.0.ff.up.weight"]
    )

    main(["export", "--checkpoint", str(last), "--out", "exported"])
    assert (tmp_path / "exported" / "tokenizer.json").is_file()
    fresh = CausalLM(
        CausalLMConfig(**json.loads((tmp_path / "exported/config.json").read_text())["model"])
    ).eval()
    load_blocks(fresh, tmp_path / "exported", ["blocks", "embeddings", "head"])
    tokens = torch.randint(0, GPT2_VOCAB_SIZE, (2, 40))
    torch.testing.assert_close(fresh(tokens), task.model(tokens), atol=0, rtol=0)


def test_export_of_a_lora_checkpoint_merges_the_adapters(converted, configs, tmp_path):
    args = ["--config", str(configs / "text_lm_finetune.yaml"), "--config", str(configs / "text_lm_finetune_tiny.yaml"),
            "--model.init_args.finetune.freeze=[\"*\"]", "--model.init_args.finetune.lora={rank: 2, alpha: 4}",
            "--trainer.limit_val_batches=0", "--trainer.callbacks=[]", "--trainer.logger=false",
            "--trainer.enable_checkpointing=false"]  # fmt: skip
    from tasks.cli import MultimodalCLI
    from tasks.language_modeling import LanguageModeling

    cli = MultimodalCLI(["fit", *args], data_links=LanguageModeling.data_links)
    task = cli.model
    assert isinstance(task.model.decoder.blocks[0].attention.to_qkv, LoRALinear)
    cli.trainer.save_checkpoint(tmp_path / "lora.ckpt")
    main(["export", "--checkpoint", str(tmp_path / "lora.ckpt"), "--out", "merged"])
    plain = load_gpt2(tmp_path / "hf", dropout=0.0, attention_dropout=0.0)  # same sizes, GPT-2's weights
    load_blocks(plain, tmp_path / "merged", ["blocks", "embeddings", "head"])
    tokens = torch.randint(0, GPT2_VOCAB_SIZE, (2, 30))
    torch.testing.assert_close(plain(tokens), task.model.eval()(tokens), atol=1e-5, rtol=1e-5)


def test_convert_timm_vit_command(tmp_path):
    timm = pytest.importorskip("timm")
    from safetensors.torch import save_file

    from multimodal.models import ViT, ViTConfig

    reference = timm.create_model("vit_small_patch16_224", pretrained=False, img_size=32, patch_size=8,
                                  embed_dim=48, depth=1, num_classes=4).eval()  # fmt: skip
    save_file(
        {n: t.contiguous() for n, t in reference.state_dict().items()}, str(tmp_path / "vit.safetensors")
    )
    main(["convert", "timm-vit", "--weights", str(tmp_path / "vit.safetensors"), "--model-name",
          "vit_small_patch16_224", "--out", str(tmp_path / "vit")])  # fmt: skip
    meta = json.loads((tmp_path / "vit" / "config.json").read_text())
    assert meta["model_class"] == "ViT" and meta["model"]["num_heads"] == 6
    model = ViT(
        ViTConfig(**{k: v for k, v in meta["model"].items() if k not in ("grid_size", "max_seq_len")})
    )
    load_blocks(model, tmp_path / "vit", ["blocks", "embeddings", "head"])
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert (reference(images) - model.eval()(images)).abs().max() < 1e-4
