"""The `multimodal` command: config parsing, unknown keys, fit, checkpoints, resume, generate."""

import os
import subprocess
import sys
from pathlib import Path

import pretty_midi
import pytest
import torch

from tasks.checkpoint import load_task
from tasks.cli import COMMANDS, MultimodalCLI, main, task_class_from_args
from tasks.music_continuation import MusicContinuation

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
MUSIC = ["--config", str(CONFIGS / "music_continuation.yaml"), "--config", str(CONFIGS / "music_continuation_tiny.yaml")]
RUN = Path("outputs/music_continuation/lightning_logs/version_0")  # where the config writes, relative to the working folder


@pytest.fixture
def music_args(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # every output of the run lands in tmp_path
    return MUSIC


def test_config_names_the_task_and_its_links():
    assert task_class_from_args(["fit", *MUSIC]) is MusicContinuation
    assert MusicContinuation.data_links["vocab_size"] == "model.vocab_size"


def test_parse_links_vocab_size_from_the_data(music_args):
    cli = MultimodalCLI(music_args, data_links=MusicContinuation.data_links, run=False)
    # The config's duration vocabulary: 3 specials, 100 time shifts, 32 velocities, 128 pitches and
    # 200 durations (every 10 ms to 1 s, every 50 ms to 4 s, every 100 ms to 8 s).
    assert cli.model.config.vocab_size == cli.datamodule.tokenizer.vocab_size == 3 + 100 + 32 + 128 + (100 + 60 + 40)
    assert cli.model.config.dim == 32  # the tiny override won over the base config


def test_unknown_config_key_is_rejected_with_its_name(music_args, capsys):
    with pytest.raises(SystemExit):
        main(["fit", *music_args, "--data.init_args.sequence_length=64"])
    assert "sequence_length" in capsys.readouterr().err


def test_fit_checkpoint_reload_resume_and_generate(music_args, tmp_path):
    main(["fit", *music_args])
    last = tmp_path / RUN / "checkpoints" / "last.ckpt"
    assert last.is_file()
    assert list((tmp_path / RUN).glob("samples/epoch_0/sample_0.mid")), "sample callback wrote no MIDI"

    # Reload without unpickling; same weights give the same logits as the saved state dict.
    task, tokenizer, _ = load_task(last)
    state = torch.load(last, weights_only=True)["state_dict"]
    fresh = MusicContinuation(model=task.hparams["model"]).eval()
    fresh.load_state_dict(state)
    tokens = torch.randint(0, tokenizer.vocab_size, (2, 20))
    torch.testing.assert_close(task(tokens), fresh(tokens))
    assert tokenizer.vocab_size == task.config.vocab_size

    # An interrupted run resumes from its last checkpoint: the step counter continues.
    steps_before = torch.load(last, weights_only=True)["global_step"]
    main(["fit", *music_args, "--trainer.max_epochs=2", "--ckpt_path=last"])
    assert torch.load(last, weights_only=True)["global_step"] == 2 * steps_before

    out = tmp_path / "generated"
    main(["generate", "--checkpoint", str(last), "--out", str(out), "--max-new-tokens", "40", "--seed", "1",
          "--num-samples", "2", "--primer-seconds", "3"])  # fmt: skip
    for index in range(2):
        midi = pretty_midi.PrettyMIDI(str(out / f"sample_{index}.mid"))
        assert sum(len(instrument.notes) for instrument in midi.instruments) > 0
        assert (out / f"sample_{index}.png").stat().st_size > 1000
        assert (out / f"sample_{index}.wav").is_file()

    # A folder of primers: each file continued once, in batches; a corrupt file is skipped by name.
    primers = tmp_path / "primers"
    primers.mkdir()
    for index in range(3):
        midi = pretty_midi.PrettyMIDI()
        piano = pretty_midi.Instrument(0)
        piano.notes = [pretty_midi.Note(80, 60 + index + step, 0.25 * step, 0.25 * step + 0.2) for step in range(4 + 3 * index)]
        midi.instruments.append(piano)
        midi.write(str(primers / f"piece{index}.mid"))
    (primers / "broken.mid").write_bytes(b"MThd\x00")
    with pytest.warns(UserWarning, match="broken.mid"):
        main(["generate", "--checkpoint", str(last), "--primer", str(primers), "--out", str(tmp_path / "batch"),
              "--batch-size", "2", "--max-new-tokens", "16", "--no-audio", "--seed", "0"])  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "batch").glob("*.mid")) == ["piece0.mid", "piece1.mid", "piece2.mid"]


def test_overview_lists_the_tools(capsys):
    main([])
    shown = capsys.readouterr().out
    assert "fit" in shown and "generate" in shown
    assert "generate" in COMMANDS


def test_console_script_prints_the_resolved_config():
    result = subprocess.run(
        [sys.executable, "-m", "tasks.cli", "fit", *MUSIC, "--print_config"], capture_output=True, text=True, check=True
    )
    assert "class_path: tasks.music_continuation.MusicContinuation" in result.stdout
    assert "position: relative" in result.stdout


@pytest.mark.parametrize("config", ["music_continuation", "text_lm", "image_classification", "image_generation",
                                    "super_resolution", "transcription"])  # fmt: skip
def test_every_model_field_is_typed_for_the_parser(config, capsys):
    """The model configs' inherited fields are checked by type: a bad choice ends the parse naming the field and
    its choices, and the resolved config dumps without a tuple that would read back as a list."""
    import warnings

    with pytest.raises(SystemExit) as refused:
        main(["fit", "--config", str(CONFIGS / f"{config}.yaml"), "--model.init_args.model.position=bogus",
              "--print_config"])  # fmt: skip
    assert refused.value.code == 2
    error = capsys.readouterr().err
    assert 'Parser key "position"' in error and "Literal['none', 'sinusoidal'" in error and "bogus" in error
    with warnings.catch_warnings(record=True) as caught, pytest.raises(SystemExit):
        warnings.simplefilter("always")
        main(["fit", "--config", str(CONFIGS / f"{config}.yaml"), "--print_config"])
    assert "local_query_shape:" in capsys.readouterr().out
    assert not [w for w in caught if "does not round-trip" in str(w.message)]


def test_the_chorale_config_replaces_the_shipped_shares_and_starts_from_the_shipped_model(capsys):
    """configs/pretrained/music_chorales.yaml on top of the shipped model's config: its shares replace the
    first config's (a merged dict would sum past 1) and it starts from the shipped folder."""
    import yaml

    pretrained = CONFIGS / "pretrained"
    with pytest.raises(SystemExit) as printed:  # --print_config prints and exits
        main(["fit", "--config", str(CONFIGS / "music_continuation.yaml"), "--config", str(pretrained / "music.yaml"),
              "--config", str(pretrained / "music_chorales.yaml"), "--print_config"])  # fmt: skip
    assert printed.value.code in (0, None)
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["data"]["init_args"]["collection_shares"] == {"bach": 0.7, "monteverdi": 0.1}
    assert config["model"]["init_args"]["finetune"]["init_from"] == "music"
    assert config["trainer"]["max_steps"] == 1000


def test_generate_and_perplexity_find_each_task_s_command_module_by_its_registered_name():
    """Tasks train, commands command: one mapping names the command module of each task that has one."""
    from tasks.base import Task
    from tasks.commands import TASK_COMMANDS, task_commands
    from tasks.registry import TASKS

    assert set(TASK_COMMANDS) <= set(TASKS)
    for name in TASK_COMMANDS:
        commands = task_commands(name)
        assert callable(commands.add_generate_arguments), name
        for command in ("generate", "perplexity"):
            if getattr(commands, f"run_{command}", None) is not None:
                assert callable(getattr(commands, f"add_{command}_arguments")), (name, command)
    assert "CausalLMTask" in TASKS and task_commands("CausalLMTask") is None  # refused by both commands in one line
    protocol = ("supports", "run_generate", "add_generate_arguments", "run_perplexity", "add_perplexity_arguments")
    assert not any(hasattr(Task, name) for name in protocol)  # no command-line protocol on the tasks


def test_the_projects_warnings_are_one_line_and_the_others_go_to_python(monkeypatch, capsys, tmp_path):
    import types

    from tasks.cli import one_line_warnings

    # a test run may import tasks as a namespace package (no __file__): its folders are what counts
    namespace = types.ModuleType("tasks")
    namespace.__path__ = [str(Path(__file__).resolve().parents[2] / "tasks")]
    monkeypatch.setitem(sys.modules, "tasks", namespace)
    shown = []
    show = one_line_warnings(lambda *args: shown.append(args))
    show(UserWarning("skipping a.mid:\n  not MIDI"), UserWarning, str(Path(namespace.__path__[0]) / "commands/music.py"), 3)
    assert capsys.readouterr().err == "warning: skipping a.mid: not MIDI\n" and not shown
    show(UserWarning("theirs"), UserWarning, str(tmp_path / "lightning.py"), 7)
    assert len(shown) == 1 and shown[0][2].endswith("lightning.py") and capsys.readouterr().err == ""
    # the same message again (a corpus read twice skips the same file twice) is not repeated; another one is
    ours = str(Path(namespace.__path__[0]) / "data.py")
    show(UserWarning("skipping a.mid: not MIDI"), UserWarning, ours, 9)
    show(UserWarning("skipping b.mid: not MIDI"), UserWarning, ours, 9)
    assert capsys.readouterr().err == "warning: skipping b.mid: not MIDI\n"


def test_a_fit_leaves_out_lightnings_advertisement_and_its_own_deprecations(tmp_path):
    """``make demo`` printed a cloud logger's advertisement and a deprecation inside Lightning; its own
    information (the seed, the model summary) still shows. A process of its own: pytest captures logs and
    warnings itself."""
    environment = {key: value for key, value in os.environ.items() if key != "MULTIMODAL_DEBUG"}
    result = subprocess.run([sys.executable, "-m", "tasks.cli", "fit", *MUSIC, "--trainer.max_steps=1",
                             "--trainer.enable_progress_bar=false", f"--trainer.default_root_dir={tmp_path}"],
                            capture_output=True, text=True, check=True, env=environment)  # fmt: skip
    output = result.stdout + result.stderr
    assert "Seed set to 0" in output and "Total params" in output
    assert "litlogger" not in output and "LeafSpec" not in output
