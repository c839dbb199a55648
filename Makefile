# The two commands: `make demo` and `make test`. Each installs what it needs (Debian 12),
# configures, builds and runs. Everything else goes through meson/ninja in build*/.
BUILD ?= build
ASAN_BUILD ?= build-asan
PKGS := gcc g++ make meson ninja-build pkg-config libcriterion-dev libucx-dev libopenblas-dev ucx-utils \
	libxxhash-dev libjansson-dev zlib1g-dev
# make test-hosts only: network namespaces and a veth pair (ip), UTS namespaces (unshare).
HOSTS_PKGS := iproute2 util-linux
# make test only: the timeline test renders the demo's page in headless Chromium
# (tests/tools/test_timeline.sh); the studio test drives it with selenium (test_studio.py).
# make demo needs no browser.
TEST_PKGS := chromium chromium-driver python3-selenium $(HOSTS_PKGS)
MESON_FLAGS := -Dwerror=true

.PHONY: all deps test-deps build demo train train-moe train-compare test test-hosts test-gpu-sim test-asan bench fuzz gpu-check \
	fresh-check \
	clean

all: build

deps:
	@sh tools/ensure-deps.sh $(PKGS)

test-deps:
	@sh tools/ensure-deps.sh $(PKGS) $(TEST_PKGS)

build: deps
	@test -f $(BUILD)/build.ninja || meson setup $(BUILD) $(MESON_FLAGS)
	ninja -C $(BUILD)

demo: build
	./$(BUILD)/examples/demo $(BUILD)

# The Llama-style model of examples/tiny_llama.c trained on the GPL-3 text from a config file
# (examples/configs/; default: 4 in-process ranks as dp_shard=2 x tp=2); CONFIG picks another,
# TRAIN_ARGS overrides keys (--training.steps 50 --parallelism.tp 4 ...; train --help).
CONFIG ?= examples/configs/default.json
TRAIN_ARGS ?=
train: build
	./$(BUILD)/examples/train $(CONFIG) --metrics.trace_out $(BUILD)/train_trace $(TRAIN_ARGS)

# Its MoE form on 8 in-process ranks as dp=2 x ep=2 x tp=2 (4 experts, top-2; README.md).
train-moe: build
	./$(BUILD)/examples/train examples/configs/dp2_ep2_tp2_moe.json \
		--metrics.trace_out $(BUILD)/train_trace $(TRAIN_ARGS)

# make train's layouts (DDP, FSDP, TP+SP, FSDP x TP, pipeline AFAB and 1F1B, context and expert
# parallel), 3 traced steps each, side by side in the trace studio: build/train_compare.html.
train-compare: build
	sh tools/train-compare.sh $(BUILD) $(TRAIN_ARGS)

test: test-deps build test-gpu-sim
	meson test -C $(BUILD) --print-errorlogs

# As root: ranks on two simulated hosts of this machine (network and UTS namespaces joined by a
# veth pair): collectives, the hierarchical all_reduce, training, a checkpoint and a killed rank
# over UCX between them (tests/comm/test_two_hosts.sh; make test runs it too, skipped unless root).
test-hosts: build
	@sh tools/ensure-deps.sh $(HOSTS_PKGS)
	meson test -C $(BUILD) --print-errorlogs --verbose two_hosts

# The CUDA path (kernels, device memory, the device side of tensors, redistribute and the
# local collectives) run against cudasim, which executes the kernels on the CPU: gpu_check's
# every op and redistribution, on machines without a GPU. CUDASIM_GUARD=1: host code that
# touches device memory crashes, as it would on a GPU. CUDASIM_CC=80: an Ampere device, so
# float8 GEMMs take the widening path there (cuBLASLt's float8 GEMM on the default sm_90).
SIM_BUILD ?= build-sim
test-gpu-sim: deps
	@test -f $(SIM_BUILD)/build.ninja || meson setup $(SIM_BUILD) $(MESON_FLAGS) -Dgpu_sim=true \
		-Dtests=false -Ducx=disabled
	ninja -C $(SIM_BUILD)
	./$(SIM_BUILD)/tests/gpu/gpu_check
	CUDASIM_GUARD=1 ./$(SIM_BUILD)/tests/gpu/gpu_check --quick
	CUDASIM_GUARD=1 ./$(SIM_BUILD)/tests/gpu/ckpt_gpu_check > /dev/null
	CUDASIM_DEVICES=2 CUDASIM_CC=80 ./$(SIM_BUILD)/tests/gpu/gpu_check --quick > /dev/null
	CUDASIM_GUARD=1 ./$(SIM_BUILD)/examples/demo --cuda $(SIM_BUILD) > /dev/null
	sh tests/gpu/nccl_checks.sh $(SIM_BUILD) --sim
	./$(SIM_BUILD)/bench/bench_gpu --smoke > /dev/null

# AddressSanitizer + UndefinedBehaviorSanitizer build of the same suite.
test-asan: deps
	@test -f $(ASAN_BUILD)/build.ninja || meson setup $(ASAN_BUILD) $(MESON_FLAGS) -Dcuda=disabled \
		-Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false
	ninja -C $(ASAN_BUILD)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		meson test -C $(ASAN_BUILD) --print-errorlogs --timeout-multiplier 4

# QUICK=1: shorter sweeps (local and UCX: x16 sizes up to 16 MiB) and growth tables (7 rounds).
# DT_TORCH_PYTHON adds PyTorch (training, the cached add, DTensor redistribute on gloo); DT_BENCH_UCX_ENVS picks
# the environments the UCX sweep runs under (bench/bench_ucx_util.h).
bench: build
	@BENCH_QUICK=$(QUICK) sh tools/bench-table.sh $(BUILD)

# On a GPU machine with nvcc, meson and ninja only: every op and redistribution on CUDA
# against the CPU, then the GPU benchmarks; exits 77 without a GPU.
gpu-check:
	@sh tools/gpu-check.sh build-gpu

# As root: make demo and make test on a clone of HEAD in a minimal Debian 12 root made with
# debootstrap (only git, ca-certificates and make added), as on a bare machine.
fresh-check:
	@sh tools/fresh-check.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(SIM_BUILD) build-gpu

# Fuzz the text parsers, then the checkpoint readers (metadata.json, safetensors headers), for
# FUZZ_SECONDS (default 60) each with libFuzzer (clang). The checkpoint target starts from
# tests/fuzz/seeds/checkpoint (copied, so that the corpus it grows stays in build-fuzz) and a
# dictionary of JSON tokens and the formats' keys: from nothing, the fuzzer spends its time
# finding well-formed JSON before it reaches the checks behind it.
FUZZ_SECONDS ?= 60
fuzz: deps
	@test -f build-fuzz/build.ninja || CC=clang meson setup build-fuzz -Dtests=false -Dcuda=disabled \
		-Dc_args=-fsanitize=fuzzer-no-link \
		-Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
	ninja -C build-fuzz
	clang -g -fsanitize=fuzzer,address,undefined -Iinclude tests/fuzz/fuzz_parse.c \
		-Lbuild-fuzz -ldtensor -Wl,-rpath,$(CURDIR)/build-fuzz -o build-fuzz/fuzz_parse
	./build-fuzz/fuzz_parse -max_total_time=$(FUZZ_SECONDS) -max_len=64
	clang -g -fsanitize=fuzzer,address,undefined -Iinclude tests/fuzz/fuzz_checkpoint.c \
		-Lbuild-fuzz -ldtensor -Wl,-rpath,$(CURDIR)/build-fuzz -o build-fuzz/fuzz_checkpoint
	mkdir -p build-fuzz/corpus-checkpoint && cp tests/fuzz/seeds/checkpoint/* build-fuzz/corpus-checkpoint/
	./build-fuzz/fuzz_checkpoint -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
		-dict=tests/fuzz/checkpoint.dict build-fuzz/corpus-checkpoint
