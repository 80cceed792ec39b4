# SPDX-License-Identifier: BSD-3-Clause
# The two commands: `make test` (set up, build, run every test, then the sanitizer legs and the
# format check) and `make bench` (the main job). Both install missing Debian packages first, so
# they work on a fresh Debian 12 machine.
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
MESON_OPTS ?=
DEB_PACKAGES := meson ninja-build pkg-config g++ libfmt-dev libssl-dev nlohmann-json3-dev catch2 libdlpack-dev iproute2 iperf3 openmpi-bin openssh-client \
  clang libclang-rt-14-dev clang-format ccache
# ccache: a later `make test` compiles only what changed, from any clone. base_dir makes the
# paths in a compile command relative to the checkout, and nohashdir leaves the working
# directory out of the hash (-g would put it in), so that a fresh clone in another folder finds
# the objects the last one made (CI clones anew each run).
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := true
# Only the tests need these: torch 1.13 with its C++ headers (about 830 MB) for the torch
# backend, debootstrap for the torch 2.6 root, nftables for the liveness test's drop rule.
# `make bench` does without them.
TEST_PACKAGES := python3-torch libtorch-dev pybind11-dev python3-dev debootstrap nftables abigail-tools
# `make test-pip` also needs pip's build backend (meson-python) and venv.
PIP_TEST_PACKAGES := python3-mesonpy python3-venv
test test-unit build-unit test-torch26 build-torch26 test-torch-suite: DEB_PACKAGES += $(TEST_PACKAGES)
test-pip: DEB_PACKAGES += $(TEST_PACKAGES) $(PIP_TEST_PACKAGES)
# The sanitizer legs need llvm-symbolizer (in llvm-14): without it a report's frames are
# "<null> (binary+0x...)", unreadable, and suppressions by function name never match.
SYMBOLIZER := /usr/lib/llvm-14/bin/llvm-symbolizer
test test-asan build-asan test-tsan build-tsan: DEB_PACKAGES += llvm-14
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps setup build test test-unit test-asan test-tsan test-torch26 test-torch test-torchnew test-torch-suite test-torch-matrix test-pip wheels test-wheels format-check format bench clean \
  build-unit build-asan build-tsan build-torch26 build-torchnew

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

# The five legs, scheduled for a 2-core machine by scripts/test_legs.sh: the builds one after
# another, each leg's tests as soon as its own build is done, while the next leg builds; the
# format check at once. Each leg's
# output is printed whole when that step ends (never interleaved), then a table of every leg
# with its result, wall and CPU seconds. Every leg runs even when another one failed, and the
# target fails if any did: CI sees all findings in one run. The Debian 13 root of the torch 2.6
# leg (minutes of downloads and unpacking, once) is made in the background from the start;
# build-torch26 waits for it (scripts/torch26_root.sh takes a lock) or makes it itself.
TORCH26_ROOT_LOG := build-torch26-root.log
TORCH_VENV_LOG := build-torchnew-venv.log
test: | deps
	@($(SUDO) scripts/torch26_root.sh >/dev/null 2>$(TORCH26_ROOT_LOG) &); \
	(scripts/torch_venv.sh $(TORCH_NEWEST) >/dev/null 2>$(TORCH_VENV_LOG) &); \
	MAKE="$(MAKE)" scripts/test_legs.sh

# The normal suite: every test, default build (debugoptimized, werror). The leg builds
# everything (benchmarks, examples, measurement tools), so that `make test` also checks that
# all of it compiles.
build-unit: build

test-unit: build-unit
	meson test -C $(BUILD) --no-rebuild --print-errorlogs --num-processes 2

# Sanitizer legs: their own build dirs, no benchmarks or examples; each builds only what its
# tests run (`meson-test-prereq`: the test binaries and the programs they declare in
# `depends`). halt_on_error / -fno-sanitize-recover: the first finding fails the test (also in
# forked ranks, which leave with _exit and would otherwise never report). See README
# "Sanitizer legs". No torch backend: the Python interpreter that would load it is not built
# with the sanitizer.
# -O1 -g1 (after meson's -O2 -g): about half the compile time of -O2 -g on the test files
# (docs/results.md, "`make test` on 2 cores"). The sanitizers' documentation asks for -O1 or
# higher; -g1 keeps the line tables that a report's symbolized stack trace needs (function,
# file, line) and drops only the variables' descriptions, which a report never prints.
# The test files themselves are compiled at -O0 in these legs (tests/meson.build: almost half
# of a test file's compile time under the sanitizers is optimizing Catch2's assertions).
# library_unity: the library as unity files of about 8 sources (src/meson.build): under ASan
# 175 CPU s instead of 364 (docs/results.md, "`make test` on 2 cores"), where ccache is absent
# (`make deps` installs it) or CCACHE_DISABLE is set. With ccache, the library's files one by
# one: meson's unity files include their sources by absolute path, so the cache never matches
# them in another checkout, while a file's own object is found again from any clone (base_dir).
CCACHE := $(if $(CCACHE_DISABLE),,$(shell command -v ccache 2>/dev/null))
SAN_UNITY := $(if $(CCACHE),false,true)
SAN_MESON_OPTS := -Dbench=false -Dexamples=false -Db_lundef=false -Dtorch=disabled \
  -Dlibrary_unity=$(SAN_UNITY)
SAN_FLAGS := -O1 -g1 -fno-omit-frame-pointer -fno-sanitize-recover=all
SAN_ENV := ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:detect_leaks=1:print_summary=1:external_symbolizer_path=$(SYMBOLIZER) \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:print_summary=1:external_symbolizer_path=$(SYMBOLIZER) \
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:print_summary=1:external_symbolizer_path=$(SYMBOLIZER):suppressions=$(CURDIR)/tests/sanitizers/tsan.supp

# ASan + UBSan: the whole suite except tests that cannot run sanitized (see ASAN_SKIP).
# installed_package links a program against the installed libchorus with pkg-config flags only,
# which do not carry the sanitizer runtime.
# store_fuzz builds its own clang libFuzzer binary, already under ASan: the leg would run it twice.
# store_hostile asserts the server's RSS, which ASan's shadow memory and quarantine inflate.
ASAN_SKIP := installed_package store_fuzz store_hostile
# g++ 12 false positive, ASan builds only: -Wmaybe-uninitialized on std::function inside
# <regex> with -fsanitize=address (GCC PR 105616; Catch2's runner and readme_env_test include
# <regex>). The default build keeps the warning.
ASAN_GCC12_NOWARN := -Wno-maybe-uninitialized
$(ASAN_BUILD)/build.ninja: | deps
	meson setup $(ASAN_BUILD) $(SAN_MESON_OPTS) -Db_sanitize=address,undefined \
	  -Dcpp_args='$(SAN_FLAGS) $(ASAN_GCC12_NOWARN)' -Dc_args='$(SAN_FLAGS)'

build-asan: $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD) meson-test-prereq

test-asan: build-asan
	$(SAN_ENV) scripts/run_tests.sh $(ASAN_BUILD) --skip "$(ASAN_SKIP)" --timeout-multiplier 3

# TSan (clang 14: LLVM's own TSan; the leg also keeps the clang build warning-free): the tests
# that run several threads in one process (engine + caller threads, callers driving the engine's
# loop, the link connector, store server + clients, Work callbacks, the DDP reducer's
# callbacks), and sanitizer_report (a deliberate race whose report must name its line: the
# harness's check that reports are readable). libclang-rt-14-dev holds its runtime.
TSAN_TESTS := core store_contract store_tcp store_mp tcp_collectives_mp tcp_failures_mp tcp_threads_mp \
  tcp_links_mp tcp_membership_mp tcp_board_mp tcp_shared_buffer_mp \
  tcp_misc_mp tcp_addressing_mp tcp_engine_faults tcp_shrink_mp tcp_grow_mp capi capi_mp ddp_mp chorusrun \
  sanitizer_report
# chorusrun's test runs the launcher (store server thread + supervisor) and chorus-store.
TSAN_TOOLS := tools/chorusrun tools/chorus-store
# CC/CXX set: meson then adds no ccache of its own, so the leg names it where it is installed.
$(TSAN_BUILD)/build.ninja: | deps
	CC="$(strip $(CCACHE) clang)" CXX="$(strip $(CCACHE) clang++)" meson setup $(TSAN_BUILD) $(SAN_MESON_OPTS) -Db_sanitize=thread \
	  -Dcpp_args='$(SAN_FLAGS)' -Dc_args='$(SAN_FLAGS)'

build-tsan: $(TSAN_BUILD)/build.ninja
	ninja -C $(TSAN_BUILD) $(addprefix tests/test_,$(filter-out sanitizer_report,$(TSAN_TESTS))) \
	  $(TSAN_TOOLS) tests/sanitizers/racy_snippet

test-tsan: build-tsan
	$(SAN_ENV) scripts/run_tests.sh $(TSAN_BUILD) --only "$(TSAN_TESTS)" --timeout-multiplier 4

# The torch tests again on torch 2.6, in a Debian 13 root (see scripts/test_torch26.sh); the
# default leg ran them on the system's torch 1.13. build-torch26 only builds (the script's
# command `true`).
build-torch26: | deps
	$(SUDO) scripts/test_torch26.sh true

test-torch26: | deps
	$(SUDO) scripts/test_torch26.sh

# The torch tests on torch $(TORCH) from the package index (`make test-torch TORCH=2.15`), in
# its cached virtual environment (scripts/torch_venv.sh: ~/.cache/chorus/torch-VERSION-cpXY,
# made once, several GB) and build dir build-torch-VERSION (scripts/test_torch_venv.sh). Needs
# python3-venv and the package index the first time.
TORCH ?= 2.15
test-torch: DEB_PACKAGES += python3-venv
test-torch: | deps
	scripts/test_torch_venv.sh $(TORCH)

# The torchnew leg of `make test`: the same on the newest torch from the package index, the
# newest release chorus supports (the torch26 leg is the oldest, the unit leg Debian 12's 1.13).
# `make test` starts making its environment in the background at its beginning (a download of
# about 3 GB the first time on a machine; then cached); build-torchnew waits for it.
TORCH_NEWEST := 2.15
# The oldest torch release chorus supports from the package index (its wheels before 2.7 have the
# pre-C++11 ABI: the whole build then takes it, python/probe).
TORCH_OLDEST := 2.6
test build-torchnew test-torchnew: DEB_PACKAGES += python3-venv
build-torchnew: | deps
	scripts/test_torch_venv.sh $(TORCH_NEWEST) true

test-torchnew: | deps
	scripts/test_torch_venv.sh $(TORCH_NEWEST)

# The torch tests, torch's suite_subset and every workload against gloo on each supported torch
# minor from the package index, 2.6 through 2.15 (scripts/test_torch_matrix.sh; a venv of several
# GB each, made once; about 20 minutes a version on 2 cores): its table goes to docs/results.md.
# `make test-torch-matrix TORCH_MATRIX="2.6 2.11 2.15"` runs some of them.
test-torch-matrix: DEB_PACKAGES += python3-venv
test-torch-matrix: | deps
	scripts/test_torch_matrix.sh $(TORCH_MATRIX)

# torch's own distributed test suite, whole, gloo and chorus side by side at 2 and 3 ranks (and
# the group tests at 8), on torch 1.13, Debian 13's 2.6 and the package index's 2.15
# (scripts/test_torch_suite.sh; 14 runs of 1-2 minutes on 2 cores, plus the builds).
# `make test` runs a subset of it (case suite_subset of tests/torch/run_torch_tests.py, in every
# torch leg).
test-torch-suite: DEB_PACKAGES += python3-venv
test-torch-suite: setup
	scripts/test_torch_suite.sh

# Binary wheels, one per torch release in $(WHEEL_TORCH) (`make wheels WHEEL_TORCH="2.6 2.15"`),
# into dist/: built in that torch's cached virtual environment, pinned to its minor release,
# repaired to a manylinux tag (scripts/build_wheels.sh). `make test-wheels` then installs each
# into a fresh virtual environment holding only that torch and runs DDP there, with no compiler
# (scripts/test_wheels.sh).
WHEEL_TORCH ?= $(TORCH_OLDEST) $(TORCH_NEWEST)
wheels test-wheels: DEB_PACKAGES += python3-venv
wheels: | deps
	scripts/build_wheels.sh $(WHEEL_TORCH)

test-wheels: wheels
	scripts/test_wheels.sh $(WHEEL_TORCH)

# `pip install --no-build-isolation .` into a virtual environment whose torch is not the
# system's (a wheel-layout copy; as root the system's is hidden), then DDP under the
# environment's chorusrun, python -m chorus.run and torchrun, `pip wheel`, `pip uninstall`
# (scripts/test_pip.sh). A whole build of the library and the extension (about 6 minutes on 2
# cores): not a leg of `make test`.
test-pip: | deps
	scripts/test_pip.sh

# clang-format 14 with .clang-format over every C/C++ source; `make format` applies it.
format-check: | deps
	scripts/check_format.sh

format: | deps
	scripts/format.sh

# The main job: 4 ranks of all_reduce_perf over the tcp backend, 8 B to 64 MiB, results checked.
# Builds only the library, the tools and the benchmarks (meson alias `benchmarks`), not the tests.
bench: setup
	ninja -C $(BUILD) benchmarks
	PATH="$(CURDIR)/$(BUILD)/bench:$$PATH" $(BUILD)/tools/chorusrun --standalone -n 4 all_reduce_perf -b 8 -e 64M -f 4 -c 1

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) build-torch26 build-torch-* $(TORCH26_ROOT_LOG) $(TORCH_VENV_LOG) test-logs
