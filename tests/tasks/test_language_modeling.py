"""Text LM task: targets and EOS, perplexity and bits per byte, sliding windows, the CLI end to end."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from multimodal.data.text_windows import DocumentWindows, token_byte_lengths, window_plan
from multimodal.generation import generate, sample_next
from multimodal.layers import RelativePositionEmbedding, attend, attend_reference
from multimodal.models import CausalLMConfig
from multimodal.text import continue_text, score_text
from multimodal.tokenizers.text import TextTokenizer
from tasks.causal_lm import CausalLMTask
from tasks.checkpoint import load_task
from tasks.cli import COMMANDS, MultimodalCLI, main
from tasks.commands.data import FETCHERS
from tasks.datamodules.text import TextDataModule
from tasks.language_modeling import LanguageModeling

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TEXT = ["--config", str(CONFIGS / "text_lm.yaml"), "--config", str(CONFIGS / "text_lm_tiny.yaml")]
RUN = Path("outputs/text_lm/lightning_logs/version_0")  # where the config writes, relative to the working folder
SAMPLES = [
    "def greet(name):\n    return f'hello {name}'\n",
    "Un café à Paris coûte 2 €; 東京 is 😀 far.\n",
    "class Point:\n    x: int = 0\n    y: int = 0\n",
]


@pytest.fixture(scope="module")
def tokenizer() -> TextTokenizer:
    return TextTokenizer.train(SAMPLES * 5, vocab_size=300)


def tiny_task(vocab_size: int, position: str = "learned", **overrides) -> LanguageModeling:
    torch.manual_seed(0)
    config = CausalLMConfig.from_preset(
        "tiny", vocab_size=vocab_size, position=position, max_seq_len=64, **overrides
    )
    return LanguageModeling(model=config).eval()


# ------------------------------------------------------------------------------ targets and EOS
def test_every_target_counts_even_eos_when_pad_equals_eos():
    """GPT-2 has PAD == EOS; text streams have no padding, so EOS targets must stay in the loss."""
    eos = 5
    batch = torch.tensor([[7, 8, eos, 9, 10, eos, 11]])
    task = tiny_task(vocab_size=16)
    nll, count = task.token_nll(batch)
    logits = task.model(batch[:, :-1])
    log_probs = torch.log_softmax(logits.double(), -1)[0]
    expected = -sum(log_probs[t, batch[0, t + 1]] for t in range(6))
    assert count == 6
    torch.testing.assert_close(nll.double(), expected, rtol=1e-5, atol=1e-5)

    padded = CausalLMTask(model=task.config, pad_id=eos).eval()
    padded.load_state_dict(task.state_dict())
    assert padded.token_nll(batch)[1] == 4  # a data module that pads ignores its pad id (here also EOS)


# ---------------------------------------------------------------------------- units and windows
def test_token_byte_lengths_spell_the_utf8_bytes(tokenizer):
    lengths = token_byte_lengths(tokenizer)
    for text in [*SAMPLES, "\x00\t\r\n ", "ñ" * 7 + "🎵"]:
        assert lengths[tokenizer.encode(text)].sum() == len(text.encode("utf-8"))
    assert lengths[[tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id]].tolist() == [0, 0, 0]


def test_uniform_model_has_perplexity_equal_to_the_vocabulary_size(tokenizer):
    task = tiny_task(tokenizer.vocab_size)
    torch.nn.init.zeros_(task.model.head.weight)  # every logit 0: each token has probability 1 / V
    text = "\n".join(SAMPLES) * 3
    score = score_text(task.model, tokenizer, text, context=16, stride=5)
    num_tokens, num_bytes = len(tokenizer.encode(text)), len(text.encode("utf-8"))
    assert score.targets == num_tokens and score.bytes == num_bytes
    assert score.perplexity == pytest.approx(tokenizer.vocab_size, rel=1e-6)  # float32 logits
    assert score.bits_per_byte == pytest.approx(
        num_tokens * math.log2(tokenizer.vocab_size) / num_bytes, rel=1e-6
    )


@pytest.mark.parametrize("length", [2, 9, 10, 11, 31])
@pytest.mark.parametrize(("context", "stride"), [(8, 8), (8, 3), (8, 1), (1, 1)])
def test_window_plan_scores_each_target_once_after_the_documented_context(length, context, stride):
    seen = {}
    for begin, end, first_target in window_plan(length, context, stride):
        assert end - begin - 1 <= context
        for position in range(first_target, end):
            assert position not in seen
            seen[position] = begin
    assert sorted(seen) == list(range(1, length))
    for position, begin in seen.items():  # the docstring's rule: begin = k * stride
        assert begin == max(0, math.ceil((position - context) / stride)) * stride


def _brute_force_nll(task, sequence: list[int], context: int, stride: int) -> float:
    """Scores target p from sequence[k * stride : p], one full forward per target (the documented rule)."""
    total = 0.0
    for position in range(1, len(sequence)):
        begin = max(0, math.ceil((position - context) / stride)) * stride
        logits = task.model(torch.tensor([sequence[begin:position]]))[0, -1]
        total -= torch.log_softmax(logits.double(), -1)[sequence[position]].item()
    return total


@torch.no_grad()
@pytest.mark.parametrize("position", ["learned", "relative"])
def test_sliding_window_nll_matches_per_token_forwards(tokenizer, position):
    task = tiny_task(tokenizer.vocab_size, position)
    text = SAMPLES[0] + SAMPLES[2]
    sequence = [tokenizer.eos_id, *tokenizer.encode(text)]
    assert len(sequence) > 20
    score = score_text(task.model, tokenizer, text, context=12, stride=5, batch_size=3)
    assert score.nll == pytest.approx(_brute_force_nll(task, sequence, 12, 5), rel=1e-5)


@torch.no_grad()
def test_sliding_window_equals_full_context_when_the_text_fits(tokenizer):
    task = tiny_task(tokenizer.vocab_size)
    text = SAMPLES[1]
    sequence = torch.tensor([[tokenizer.eos_id, *tokenizer.encode(text)]])
    logits = task.model(sequence[:, :-1])
    full = F.cross_entropy(logits[0].double(), sequence[0, 1:], reduction="sum").item()
    for stride in (1, 7, 63):
        assert score_text(task.model, tokenizer, text, context=63, stride=stride).nll == pytest.approx(
            full, rel=1e-6
        )


def test_documents_of_a_stream_are_scored_separately(tokenizer):
    ids = [tokenizer.encode(text) for text in SAMPLES]
    stream = np.array([*ids[0], tokenizer.eos_id, *ids[1], tokenizer.eos_id, *ids[2]])
    windows = DocumentWindows.from_stream(stream, tokenizer, context=8, stride=4)
    assert [list(sequence) for sequence in windows.sequences] == [[tokenizer.eos_id, *doc] for doc in ids]
    assert windows.num_targets == sum(map(len, ids))
    with pytest.raises(ValueError, match="stride must be in"):
        DocumentWindows.from_stream(stream, tokenizer, context=8, stride=9)


# ------------------------------------------------------------------------------------ generation
@pytest.mark.parametrize(
    ("top_k", "top_p", "expected"),
    [
        (None, None, [0.4, 0.3, 0.2, 0.1]),
        (2, None, [4 / 7, 3 / 7, 0, 0]),
        (None, 0.5, [4 / 7, 3 / 7, 0, 0]),  # 0.4 < 0.5 keeps token 1; 0.4 + 0.3 >= 0.5 drops token 2
        (3, 0.5, [4 / 7, 3 / 7, 0, 0]),  # top-p of the top-3 renormalised: 4/9 < 0.5, 7/9 >= 0.5
        (0, 0.95, [0.4, 0.3, 0.2, 0.1]),  # top_k=0 keeps all; 0.9 < 0.95 keeps the last token
    ],
)
def test_sampling_follows_the_truncated_renormalised_distribution(top_k, top_p, expected):
    probs = torch.tensor([0.1, 0.4, 0.2, 0.3])  # token ids 1, 3, 2, 0 by rank
    order = [1, 3, 2, 0]
    logits = probs.log().repeat(20000, 1)
    draws = sample_next(logits, top_k=top_k, top_p=top_p, generator=torch.Generator().manual_seed(0))
    frequency = torch.bincount(draws, minlength=4).double() / len(draws)
    torch.testing.assert_close(
        frequency[order], torch.tensor(expected, dtype=torch.double), atol=0.015, rtol=0
    )


def test_cached_and_uncached_greedy_decoding_agree_and_return_ordinary_tensors(tokenizer):
    model = tiny_task(tokenizer.vocab_size).model
    prompt = torch.tensor([[tokenizer.eos_id, *tokenizer.encode("def greet(")]] * 2)
    cached = generate(model, prompt, 20, temperature=0)
    assert torch.equal(cached, generate(model, prompt, 20, temperature=0, use_cache=False))
    assert cached.shape == (2, prompt.shape[1] + 20) and torch.equal(cached[:, : prompt.shape[1]], prompt)
    assert not cached.is_inference()  # usable as training input later
    eos = int(cached[0, prompt.shape[1] + 3])
    stopped = generate(model, prompt, 20, temperature=0, eos_id=eos)
    assert stopped.shape[1] <= prompt.shape[1] + 4 and (stopped[:, -1] == eos).all()


def test_generation_is_seeded_uses_the_prompt_and_respects_learned_positions(tokenizer):
    task = tiny_task(tokenizer.vocab_size)
    first = continue_text(task.model, tokenizer, "def greet(", 20, seed=3)
    assert first.startswith("def greet(") and first == continue_text(
        task.model, tokenizer, "def greet(", 20, seed=3
    )
    with pytest.raises(ValueError, match="max_seq_len=64 .* lower --max-new-tokens"):
        continue_text(task.model, tokenizer, "def greet(", 64)
    relative = tiny_task(tokenizer.vocab_size, "relative")
    assert continue_text(relative.model, tokenizer, "x", 80, temperature=0).startswith(
        "x"
    )  # no position limit


# ------------------------------------------------- decoding fast paths (multimodal.layers.attend/relative)
@pytest.mark.parametrize("relative", [False, True])
@pytest.mark.parametrize("k_len", [1, 5, 9, 23])  # the relative table reaches 6 back: 9 and 23 are clipped
def test_one_query_at_the_newest_position_matches_the_reference(relative, k_len):
    g = torch.Generator().manual_seed(k_len)
    q = torch.randn(2, 3, 1, 8, generator=g, dtype=torch.double, requires_grad=True)
    k, v = (
        torch.randn(2, 3, k_len, 8, generator=g, dtype=torch.double, requires_grad=True) for _ in range(2)
    )
    table = RelativePositionEmbedding(3, 8, max_distance=6, causal=True).double() if relative else None
    padding = torch.zeros(2, k_len, dtype=torch.bool)
    padding[1, 0] = k_len > 1
    outputs = []
    for core in (attend, attend_reference):
        out = core(q, k, v, causal=True, query_offset=k_len - 1, key_padding_mask=padding, position=table)
        parameters = [q, k, v, *([table.weight] if relative else [])]
        outputs.append((out, torch.autograd.grad(out.square().sum(), parameters)))
    (fast, fast_grads), (reference, reference_grads) = outputs
    torch.testing.assert_close(fast, reference)
    for fast_grad, reference_grad in zip(fast_grads, reference_grads, strict=True):
        torch.testing.assert_close(fast_grad, reference_grad)


# ------------------------------------------------------------------------------------------ CLI
@pytest.fixture
def corpus(tmp_path, monkeypatch):
    """A small user corpus in tmp_path, the cache in tmp_path, and tmp_path as working folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MULTIMODAL_CACHE", str(tmp_path / "cache"))
    folders = {}
    for split, repeats in (("train", 12), ("val", 2), ("test", 2)):
        folder = tmp_path / split
        folder.mkdir()
        for index, text in enumerate(SAMPLES):
            (folder / f"{split}_{index}.txt").write_text(text * (repeats + index), encoding="utf-8")
        folders[split] = folder
    files = [f"--data.init_args.{split}_files=[{folder}]" for split, folder in folders.items()]
    return [*TEXT, *files, "--data.init_args.limit=null"], folders


def test_tiny_config_links_the_trained_vocabulary(corpus):
    args, _ = corpus
    cli = MultimodalCLI(args, data_links=LanguageModeling.data_links, run=False)
    assert cli.model.config.vocab_size == cli.datamodule.tokenizer.vocab_size <= 400
    assert cli.model.config.dim == 32 and cli.model.pad_id is None


def test_fit_test_perplexity_and_generate_through_the_cli(corpus, tmp_path, capsys):
    args, folders = corpus
    main(["fit", *args])
    last = tmp_path / RUN / "checkpoints" / "last.ckpt"
    assert last.is_file()
    assert list((tmp_path / RUN).glob("samples/epoch_0.txt")), "sample callback wrote no text"

    # `multimodal test` and `multimodal perplexity` agree on the test files.
    capsys.readouterr()
    main(["test", *args, f"--ckpt_path={last}"])
    tested = {
        name: float(value)
        for name, value in re.findall(r"test_(nll|ppl|bpb)\W+([\d.]+)", capsys.readouterr().out)
    }
    assert tested.keys() == {"nll", "ppl", "bpb"}
    main(["perplexity", "--checkpoint", str(last), str(folders["test"])])
    shown = capsys.readouterr().out
    assert "context 64, stride 32" in shown
    total = re.search(r"^total\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)$", shown, re.MULTILINE)
    assert total, shown
    _, tokenizer, _ = load_task(last)
    texts = [path.read_text(encoding="utf-8") for path in sorted(folders["test"].iterdir())]
    assert int(total[1]) == sum(len(tokenizer.encode(text)) for text in texts)
    assert int(total[2]) == sum(len(text.encode("utf-8")) for text in texts)
    assert float(total[3]) == pytest.approx(tested["nll"], abs=2e-4)
    assert float(total[4]) == pytest.approx(tested["ppl"], rel=2e-4)
    assert float(total[5]) == pytest.approx(tested["bpb"], abs=2e-4)

    out = tmp_path / "sample.txt"
    generate = ["generate", "--checkpoint", str(last), "--prompt", "class Po", "--max-new-tokens", "12"]
    main(
        [
            *generate,
            "--seed",
            "7",
            "--out",
            str(out),
            "--top-k",
            "20",
            "--top-p",
            "0.9",
            "--temperature",
            "0.8",
        ]
    )
    printed = capsys.readouterr().out
    assert printed.startswith("class Po") and printed.rstrip("\n") == out.read_text(encoding="utf-8").rstrip(
        "\n"
    )
    main([*generate, "--seed", "7", "--top-k", "20", "--top-p", "0.9", "--temperature", "0.8"])
    assert capsys.readouterr().out == printed  # same seed, same text; no --out, no file needed
    assert not (tmp_path / "outputs" / "generate").exists()

    # --prompt-file: every line continued in batches, each as it would be alone (greedy).
    (tmp_path / "prompts.txt").write_text("class Po\ndef \n\nimport os\\nimport\n", encoding="utf-8")
    main(["generate", "--checkpoint", str(last), "--prompt-file", str(tmp_path / "prompts.txt"), "--batch-size", "2",
          "--max-new-tokens", "10", "--temperature", "0", "--out", str(tmp_path / "many.jsonl")])  # fmt: skip
    records = [json.loads(line) for line in (tmp_path / "many.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["prompt"] for r in records] == ["class Po", "def ", "import os\nimport"]
    for record in records:
        main(["generate", "--checkpoint", str(last), "--prompt", record["prompt"], "--max-new-tokens", "10",
              "--temperature", "0"])  # fmt: skip
        assert capsys.readouterr().out.rstrip("\n").endswith(record["text"].rstrip("\n"))


def test_overview_lists_the_text_tools(capsys):
    main([])
    shown = capsys.readouterr().out
    assert "perplexity" in shown and "data" in shown
    assert {"perplexity", "data", "generate"} <= set(COMMANDS)


# ----------------------------------------------------------------------------------- data command
def test_data_prose_prints_the_corpus_folder(tmp_path, capsys):
    corpus = tmp_path / "moby-dick"
    corpus.mkdir()
    (corpus / "README.md").write_text("complete")  # a complete folder is reused without network access
    main(["data", "prose", "--name", "moby-dick", "--cache-dir", str(tmp_path)])
    assert capsys.readouterr().out.strip() == str(corpus)


def test_data_command_lists_its_fetchers_and_refuses_unknown_names(capsys):
    assert "prose" in FETCHERS
    with pytest.raises(SystemExit):
        main(["data", "--help"])
    assert "prose" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["data", "no-such-set"])
    assert "invalid choice" in capsys.readouterr().err


def test_held_out_files_need_two_files(tmp_path):
    (tmp_path / "only.txt").write_text("one file\n")
    data = TextDataModule(train_files=[str(tmp_path)], vocab_size=280)
    with pytest.raises(ValueError, match="pass val_files"):
        data.splits  # noqa: B018
