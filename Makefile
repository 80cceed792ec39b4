# SPDX-License-Identifier: BSD-3-Clause
# The two commands: `make test` (set up, build, run every test) and `make bench` (the main job).
# Both install missing Debian packages first, so they work on a fresh Debian 12 machine.
BUILD ?= build
MESON_OPTS ?=
DEB_PACKAGES := meson ninja-build pkg-config g++ libfmt-dev catch2 libdlpack-dev iproute2 iperf3 openmpi-bin openssh-client clang-14 libclang-rt-14-dev
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps setup build test bench clean

all: build

# Installs only what is missing (dpkg -s is cheap); apt-get update only when something is.
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(BUILD)/build.ninja: | deps
	meson setup $(BUILD) $(MESON_OPTS)

setup: $(BUILD)/build.ninja

build: setup
	ninja -C $(BUILD)

test: build
	meson test -C $(BUILD) --print-errorlogs --num-processes 2

# The main job: 4 ranks of all_reduce_perf over the tcp backend, 8 B to 64 MiB, results checked.
bench: build
	PATH="$(CURDIR)/$(BUILD)/bench:$$PATH" $(BUILD)/tools/chorusrun --standalone -n 4 all_reduce_perf -b 8 -e 64M -f 4 -c 1

clean:
	rm -rf $(BUILD)
