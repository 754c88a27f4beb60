# Shared cocotb make flow. A bench's Makefile sets TOPLEVEL (the Verilog module in rtl_out/)
# and COCOTB_TEST_MODULES, then includes this file:
#     make -C sim/<bench> SIM=verilator      (default)
#     make -C sim/<bench> SIM=icarus
#     make -C sim/<bench> WAVES=1            (FST waveform in sim_build/<sim>/)
REPO    := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
SIM     ?= verilator
RTL_DIR ?= $(REPO)/rtl_out

TOPLEVEL_LANG   = verilog
COCOTB_TOPLEVEL = $(TOPLEVEL)
VERILOG_SOURCES += $(RTL_DIR)/$(TOPLEVEL).v
SIM_BUILD       ?= sim_build/$(SIM)
COCOTB_HDL_TIMEUNIT      = 1ns
COCOTB_HDL_TIMEPRECISION = 1ps

# The repo's verilator wrapper first: the system's 5.006 is too old for cocotb 2.x.
export PATH := $(REPO)/tools/bin:$(REPO)/.venv/bin:$(PATH)
export KALEIDO_PYTHON ?= $(REPO)/.venv/bin/python
export PYTHONPATH := $(REPO)/sim:$(REPO):$(PYTHONPATH)

ifeq ($(SIM),verilator)
  # Make 4.3's $(shell) does not see the PATH exported above, so name the wrapper's folder.
  VERILATOR_BIN_DIR := $(REPO)/tools/bin
  COMPILE_ARGS += $(REPO)/kaleido_hw/lint_waivers.vlt
  ifeq ($(WAVES),1)
    COMPILE_ARGS += --trace-fst --trace-structs
    SIM_ARGS     += --trace
  endif
endif

ifeq ($(SIM),icarus)
  ifeq ($(shell command -v iverilog),)
    $(error Icarus Verilog (iverilog) is not installed: 'sudo apt-get install iverilog', or use SIM=verilator)
  endif
endif

include $(shell cocotb-config --makefiles)/Makefile.sim
