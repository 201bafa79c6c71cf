# libflux -- build, test, demo, bench, install. (`make help` prints this list.)
#
#   make / make all / make lib   the shared library: build/lib/libflux.so (+ .so.MAJOR,
#                        .so.M.m.p)
#   make help            this list
#   make demo            the flight-destination example in C and Python (plain, with
#                        stores, traced); the Swift counter; JBFlux's current-user
#                        example in Swift and Python
#   make check           every test: swift test, the C harness, the header test (C, C++),
#                        the LuaJIT FFI test, pytest;
#                        one line per suite, logs in build/check/ (V=1: everything)
#   make check-swift     one of those suites alone (likewise check-c, check-header,
#                        check-luajit, check-python)
#   make check-python-versions  pytest under each other CPython installed (OTHER_PYTHONS:
#                        python3.12 python3.13 by default; one not installed is skipped)
#   make check-memory    the C harness under valgrind memcheck
#   make check-cost      instruction budgets of the hot paths (dispatch, stores, a
#                        wait), counted under cachegrind: exact, unlike a timing
#   make check-thread    the Swift tests under ThreadSanitizer
#   make check-address   the C harness against an ASan build of the library, with UBSan;
#                        the out-of-memory tests against one with the invariants checked
#   make check-thread-c  the C tests with threads under ThreadSanitizer
#   make fuzz            libFuzzer targets, FUZZ_SECONDS (60) each, after their regressions
#   make check-types     mypy --strict and ruff on the Python package and example
#   make check-format    swift format lint and ruff format --check: the tree as
#                        `make format` leaves it
#   make format          swift format and ruff format, in place
#   make check-abi       exported symbols == the header's functions; SONAME; no RPATH
#   make check-install   install staged and to a scratch prefix; pkg-config and CMake users
#   make check-pip       pip install ./bindings/python into a fresh venv
#   make check-swift-client  a SwiftPM package depending on this checkout by path
#   make check-readme    the README's examples are the files CI builds and runs
#   make bench           benchmarks, ratios against baselines measured in the same run;
#                        with VUEFLUX_SRC=/path/to/VueFlux (a checkout of ra1028/VueFlux),
#                        also the Swift layer side by side with VueFlux's own sources
#   make bench-vueflux   that side-by-side run alone (without VUEFLUX_SRC: a one-line note;
#                        VUEFLUX_CMO=1: VueFlux built with -cross-module-optimization)
#   make bench-smoke     every bench built and run once, briefly
#   make cdef            build/include/flux_cdef.h: the header's declarations for cffi, LuaJIT
#   make install PREFIX=/usr/local DESTDIR=   library, header, flux.pc, CMake package,
#                        share/libflux/flux_cdef.h
#   make uninstall       what install put there
#   make venv            pytest, pytest-xdist, hypothesis, mypy, ruff in build/venv (for an externally
#                        managed python3); used by the targets above when needed
#   make clean           every build directory
#   V=1                  show build commands and every test's output
#
# The library is built in its own scratch path (.build-lib) with the Swift
# standard library linked statically, so it loads with no LD_LIBRARY_PATH and
# no toolchain; swift test keeps the default .build. lld, not gold: gold leaves
# the (local) Swift metadata symbols in .dynsym, lld keeps only flux_*.

SWIFT   ?= swift
CC      ?= cc
CXX     ?= c++
B        := build
# The project's own virtual environment once `make venv` made it (a stock
# Debian/Ubuntu python3 refuses pip install: PEP 668), else python3.
VENV    := $(B)/venv
PYTHON  ?= $(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/python,python3)
# pip: no "running as root" warning, no version nag.
export PIP_ROOT_USER_ACTION := ignore
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# The test tools' python: PYTHON when it has them, else build/venv's, which
# the targets that need it make on demand -- so `make check` works as the
# first command on a stock machine. (find_spec: no import, no cost.)
has_modules = $(shell $(PYTHON) -c "import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in '$(1)'.split()))" 2>/dev/null && echo yes)
TEST_PYTHON  := $(if $(call has_modules,pytest hypothesis),$(PYTHON),$(VENV)/bin/python)
TYPES_PYTHON := $(if $(call has_modules,mypy ruff),$(PYTHON),$(VENV)/bin/python)
needs_venv = $(if $(filter $(VENV)/bin/python,$(1)),$(VENV)/.ready)
# TYPES_PYTHON usable from another directory (a relative path made absolute).
TYPES_PYTHON_ABS = $(if $(findstring /,$(TYPES_PYTHON)),$(abspath $(TYPES_PYTHON)),$(TYPES_PYTHON))
PREFIX  ?= /usr/local
LIBDIR  ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
CMAKEDIR ?= $(LIBDIR)/cmake/libflux
DATADIR ?= $(PREFIX)/share

field = $(shell sed -n 's/^\#define FLUX_VERSION_$(1) \([0-9]*\)$$/\1/p' include/flux.h)
MAJOR   := $(call field,MAJOR)
MINOR   := $(call field,MINOR)
PATCH   := $(call field,PATCH)
VERSION := $(MAJOR).$(MINOR).$(PATCH)

# flux.h, "Versioning": the major number names the ABI, or while it is 0,
# 0.MINOR does (0.1 and 0.2 are not compatible).
ABI      := $(if $(filter 0,$(MAJOR)),0.$(MINOR),$(MAJOR))
SONAME   := libflux.so.$(ABI)
REALNAME := libflux.so.$(VERSION)
LIB      := $(B)/lib/libflux.so
# What make runs -- the tests, demos and benches in Python -- loads this
# checkout's library whatever FLUX_LIBRARY the caller's shell names (an
# installed copy, say), which the binding would otherwise try first.
export FLUX_LIBRARY := $(abspath $(LIB))
SWIFT_SOURCES := $(shell find Sources -type f) Package.swift support/flux.map

CFLAGS   ?= -O2 -g
WARN     := -Wall -Wextra -Werror
TEST_CFLAGS := $(CFLAGS) $(WARN) -std=c11 -D_GNU_SOURCE -Iinclude -pthread
LINK_FLUX   := -L$(B)/lib -lflux -Wl,-rpath,$(abspath $(B)/lib)
# Build commands are shown with V=1 (and every test's output: support/suite.py).
V ?= 0
Q := $(if $(filter-out 0,$(V)),,@)

.PHONY: all lib cdef help demo check check-swift check-thread check-c check-header check-luajit check-python check-python-versions format check-format check-memory \
        check-cost check-types check-abi check-install check-pip check-swift-client check-readme venv \
        check-address check-thread-c fuzz \
        bench bench-vueflux bench-smoke install uninstall clean

all: lib
lib: $(LIB)

# flux.h's declarations for FFIs that read C declarations at run time
# (cffi's cdef(), LuaJIT's ffi.cdef()): no directive, attribute or system
# header; integer constants as enum constants. See support/cdef.py.
cdef: $(B)/include/flux_cdef.h
$(B)/include/flux_cdef.h: include/flux.h support/cdef.py
	@mkdir -p $(B)/include
	$(Q)$(PYTHON) support/cdef.py --cc $(CC) include/flux.h $@

help:
	@sed -n '3,/^#$$/s/^# //p' Makefile

# How the library is built: the shipped one with exactly these flags; the
# sanitizer and fuzz builds add to them (so they test the code users get),
# among others FLUX_CHECK_INVARIANTS, the engine's invariant checks.
LIB_FLAGS = -c release --product flux --disable-local-rpath \
    -Xswiftc -static-stdlib -Xswiftc -use-ld=lld -Xswiftc -cross-module-optimization \
    -Xlinker --version-script=$(CURDIR)/support/flux.map -Xlinker -soname=$(SONAME)
# x86-64: innermost loops, and so the functions holding them, aligned to 64
# bytes, not 16. With flux_dispatch's machine code unchanged, its loop at
# 16 mod 32 measured 1.13-1.25x the plain loop at N=100, at 0 mod 32
# 1.01-1.04x; with both it and the function at 0 mod 64, 1.01-1.02x and a
# one-callback dispatch of 11 ns rather than 17-20 (make bench, one sitting).
# At 16-byte alignment, which of these a build got hung on unrelated code.
ifeq ($(shell uname -m),x86_64)
LIB_FLAGS += -Xswiftc -Xllvm -Xswiftc -x86-experimental-pref-innermost-loop-alignment=6
endif
CHECKED_LIB_FLAGS = $(LIB_FLAGS) -Xswiftc -DFLUX_CHECK_INVARIANTS

# Said before a build needs Swift: make's own "swift: No such file or
# directory" tells a newcomer (or `sudo make install`, whose PATH has no
# toolchain) nothing of what to do.
need-swift = command -v $(SWIFT) >/dev/null 2>&1 || { echo "make: no Swift toolchain: '$(SWIFT)' is not on PATH." \
    "Put a Swift 6 toolchain's usr/bin on PATH (e.g. export PATH=/opt/swift/usr/bin:\$$PATH; README.md, Set-up)," \
    "or name it with SWIFT=/path/to/swift; for sudo make install, run make lib cdef as yourself first." >&2; exit 1; }

# $(call swift-lib,SCRATCH,FLAGS): builds the library in SCRATCH. swiftpm
# recompiles when sources change, not when flags do (it relinks the old
# objects), so a scratch path last built with other flags starts afresh.
define swift-lib
	$(Q)$(need-swift)
	$(Q)if [ "$$(cat $(1)/flags 2>/dev/null)" != '$(2)' ]; then \
	    rm -rf $(1) && mkdir -p $(1) && printf '%s' '$(2)' > $(1)/flags; fi
	$(Q)$(SWIFT) build $(if $(Q),--quiet) $(2) --scratch-path $(1)
endef

$(B)/lib/$(REALNAME): $(SWIFT_SOURCES) include/flux.h Makefile
	@$(if $(Q),echo "  SWIFT  $@ (release; a few minutes from scratch)")
	$(call swift-lib,.build-lib,$(LIB_FLAGS))
	@mkdir -p $(B)/lib
	$(Q)cp .build-lib/release/libflux.so $@.tmp
	$(Q)strip --strip-unneeded $@.tmp
	$(Q)mv -f $@.tmp $@    # a new inode: processes that have the old one mapped keep it

$(LIB): $(B)/lib/$(REALNAME)
	$(Q)ln -sf $(REALNAME) $(B)/lib/$(SONAME)
	$(Q)ln -sf $(REALNAME) $@

# --- C programs against the built library --------------------------------
C_TESTS := $(patsubst Tests/c/%.c,$(B)/tests/%,$(wildcard Tests/c/test-*.c))

$(B)/tests/%: Tests/c/%.c Tests/c/*.h include/flux.h $(LIB)
	@mkdir -p $(B)/tests
	@$(if $(Q),echo "  CC     $@")
	$(Q)$(CC) $(TEST_CFLAGS) -o $@ $< $(LINK_FLUX)

$(B)/examples/flight: examples/flight.c include/flux.h $(LIB)
	@mkdir -p $(B)/examples
	@$(if $(Q),echo "  CC     $@")
	$(Q)$(CC) $(TEST_CFLAGS) -o $@ $< $(LINK_FLUX)

$(B)/examples/flight-stores: examples/flight-stores.c include/flux.h $(LIB)
	@mkdir -p $(B)/examples
	@$(if $(Q),echo "  CC     $@")
	$(Q)$(CC) $(TEST_CFLAGS) -o $@ $< $(LINK_FLUX)

# --- demo ------------------------------------------------------------------
demo: $(B)/examples/flight $(B)/examples/flight-stores
	@echo "== flight-destination example, C =="
	$(B)/examples/flight
	@echo "== flight-destination example, Python =="
	PYTHONPATH=bindings/python $(PYTHON) examples/flight.py
	@echo "== flight-destination example with stores, C =="
	$(B)/examples/flight-stores
	@echo "== flight-destination example with stores, Python =="
	PYTHONPATH=bindings/python $(PYTHON) examples/flight_stores.py
	@echo "== counter example, Swift (VueFlux layer) =="
	$(SWIFT) run --quiet counter
	@echo "== JBFlux's store model, Swift: registered stores, a view bound for its life =="
	$(SWIFT) run --quiet current-user > $(B)/examples/current-user.out
	@cat $(B)/examples/current-user.out
	@echo "== JBFlux's store model, Python: registered stores, a view bound for its life =="
	PYTHONPATH=bindings/python $(PYTHON) examples/current_user.py > $(B)/examples/current_user.py.out
	@cat $(B)/examples/current_user.py.out
	@# The README: the two print the same (the Python one's output is pinned by
	@# pytest). Into files, not through tee: a pipe would hide a failing example.
	@diff -u $(B)/examples/current-user.out $(B)/examples/current_user.py.out \
	    || { echo "demo: the Swift and Python current-user examples print differently"; exit 1; }
	@echo "== flight-destination example, traced (flux.Trace), with a queued action =="
	PYTHONPATH=bindings/python $(PYTHON) examples/flight_trace.py $(B)/flight-trace.json

# --- tests -----------------------------------------------------------------
# Each suite runs quietly through support/suite.py: one line with its counts,
# the whole output in build/check/SUITE.log (printed when the suite fails),
# everything as it comes with V=1. The last line adds the suites up.
SUITE = $(PYTHON) support/suite.py run

check: check-swift check-c check-header check-luajit check-python
	@$(PYTHON) support/suite.py total "make check" swift c header luajit python

# Without XCTest tests, swift test's XCTest runner only prints "Executed 0
# tests" (twice): leave it out until a test target imports XCTest.
SWIFT_TEST := $(SWIFT) test $(if $(shell grep -rl --include='*.swift' 'import XCTest' Tests),,--disable-xctest)

# Warnings are errors here: the package promises Swift 6 mode with none.
check-swift:
	@$(SUITE) swift $(SWIFT_TEST) -Xswiftc -warnings-as-errors

# The Swift tests (threads included) under ThreadSanitizer, in a build
# directory of their own; the first report fails the run.
check-thread:
	@TSAN_OPTIONS=halt_on_error=1 $(SUITE) swift-tsan $(SWIFT_TEST) --sanitize=thread --scratch-path .build-tsan

check-c: $(C_TESTS)
	@$(SUITE) c $(PYTHON) Tests/c/run.py $(C_TESTS)

check-header: include/flux.h
	@mkdir -p $(B)/tests
	@$(SUITE) header sh -c '$(CC) -std=c99 -pedantic -Wall -Wextra -Werror -Iinclude -c -o $(B)/tests/header-c.o Tests/c/header.c \
	    && echo "ok - compiles alone as C99 -pedantic" \
	    && $(CXX) -x c++ -std=c++11 -pedantic -Wall -Wextra -Werror -Iinclude -c -o $(B)/tests/header-cxx.o Tests/c/header.c \
	    && echo "ok - compiles alone as C++11" \
	    && echo "#include <flux.h>" | $(CC) -std=c89 -pedantic -Wall -Wextra -Werror -Iinclude -x c -c -o /dev/null - \
	    && echo "ok - the header alone compiles as C89 -pedantic" \
	    && echo "#include <flux.h>" | $(CXX) -std=c++98 -pedantic -Wall -Wextra -Werror -Iinclude -x c++ -c -o /dev/null - \
	    && echo "ok - the header alone compiles as C++98 -pedantic" \
	    && missing=$$(for f in $$(CC="$(CC)" support/api-functions.sh include/flux.h); do \
	        grep -q "= $$f;" Tests/c/header.c || echo $$f; done) \
	    && if [ -n "$$missing" ]; then echo "not ok - header.c does not pin the signature of:" $$missing; exit 1; fi \
	    && echo "ok - header.c pins every FLUX_API function" && echo "5 passed, 0 failed"'

# The header as LuaJIT's FFI takes it (flux_cdef.h, verbatim): the flight
# example, a cycle's values. Skipped, saying so, without luajit; under CI
# (which installs it) a missing luajit fails.
check-luajit: $(LIB) $(B)/include/flux_cdef.h
	@if command -v luajit >/dev/null; then \
	    $(SUITE) luajit luajit Tests/luajit/flight.lua $(B)/include/flux_cdef.h $(LIB); \
	elif [ -n "$${CI:-}" ]; then echo "check-luajit: luajit is not installed" >&2; exit 1; \
	else $(SUITE) luajit sh -c 'echo "skipped: luajit is not installed"; echo "0 passed, 0 failed, 1 skipped"'; fi

# The suites run on every CPU (pytest-xdist, -n auto) when the python running
# them has it, as build/venv does (requirements-dev.txt); else one by one.
# Asked as the recipe runs: the venv may be made just before.
xdist = $$($(1) -c 'import xdist' 2>/dev/null && printf '%s' '-n auto')

check-python: $(LIB) $(B)/include/flux_cdef.h $(call needs_venv,$(TEST_PYTHON))
	@PYTHONPATH=bindings/python $(SUITE) python $(TEST_PYTHON) -m pytest -q $(call xdist,$(TEST_PYTHON)) bindings/python/tests

# The same suite under the CPythons users have besides the one make venv uses
# (Ubuntu 24.04's python3 is 3.12): the binding's interrupt and recursion
# handling depends on the interpreter's version. Each one found gets a venv
# of its own, build/venv-X.Y, with the pinned pytest, pytest-xdist, hypothesis
# and cffi.
OTHER_PYTHONS ?= python3.12 python3.13
check-python-versions: $(LIB) $(B)/include/flux_cdef.h
	@$(if $(strip $(OTHER_PYTHONS)),,echo "check-python-versions: no other python3 named (OTHER_PYTHONS): skipped";) \
	for py in $(OTHER_PYTHONS); do \
	    if ! $$py -c '' 2>/dev/null; then echo "check-python-versions: $$py is not installed: skipped"; continue; fi; \
	    v=$$($$py -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	    venv=$(B)/venv-$$v; \
	    [ -f $$venv/.ready ] || { $$py -m venv $$venv \
	        && $$venv/bin/python -m pip install -q $$(grep -E '^(pytest|pytest-xdist|hypothesis|cffi)==' support/requirements-dev.txt) \
	        && touch $$venv/.ready; } || exit 1; \
	    PYTHONPATH=bindings/python $(SUITE) python-$$v $$venv/bin/python -m pytest -q $(call xdist,$$venv/bin/python) bindings/python/tests || exit 1; \
	done

# One layout for the whole tree: swift format (.swift-format) for Swift,
# ruff format (line length 120) for Python. `make format` applies both;
# CI fails on a file either would change.
SWIFT_FORMATTED = Sources Tests Package.swift examples bench support/swift-client
format: $(call needs_venv,$(TYPES_PYTHON))
	$(SWIFT) format format -i -r $(SWIFT_FORMATTED)
	$(TYPES_PYTHON) -m ruff format bindings/python examples

check-format: $(call needs_venv,$(TYPES_PYTHON))
	$(SWIFT) format lint --strict -r $(SWIFT_FORMATTED)
	$(TYPES_PYTHON) -m ruff format --check bindings/python examples

# mypy --strict and ruff on the Python package and its tests (configured in
# bindings/python/pyproject.toml), on the README's Python example and on
# JBFlux's example, whose snippets the README shows.
check-types: $(call needs_venv,$(TYPES_PYTHON))
	cd bindings/python && $(TYPES_PYTHON_ABS) -m mypy
	$(TYPES_PYTHON) -m ruff check bindings/python examples/readme.py examples/current_user.py
	MYPYPATH=bindings/python $(TYPES_PYTHON) -m mypy --strict examples/readme.py examples/current_user.py

# Exported symbols are exactly the header's FLUX_API functions; SONAME
# libflux.so.$(ABI); no RPATH/RUNPATH; nothing needed at run time beyond
# the README's list (glibc 2.34, libstdc++, libgcc_s, libffi 8).
check-abi: $(LIB)
	support/check-abi.sh $(B)/lib/$(REALNAME) include/flux.h $(SONAME)

# make install into a scratch DESTDIR, then the README's C example built
# through pkg-config against that copy and run, and make uninstall; then the
# Install section's recipes under a scratch PREFIX.
check-install: $(LIB)
	support/check-install.sh $(SONAME)

# pip install ./bindings/python into a fresh virtual environment from a copy
# of the tree with no library built: the install builds it, or fails clearly.
check-pip:
	support/check-pip.sh

# A user's SwiftPM package depending on this checkout by path (the README's
# Swift example), built in build/ and run.
check-swift-client:
	$(SWIFT) build -q --package-path support/swift-client --scratch-path $(B)/swift-client
	test "$$($(B)/swift-client/debug/FluxClient)" = "city for australia"
	@echo "swift-client: builds against the checkout, prints city for australia"

# The README's code blocks are the files CI compiles and runs; the Python one
# prints what its comment says (the C one's output: check-install).
check-readme: $(LIB)
	support/check-readme.sh
	test "$$(PYTHONPATH=bindings/python $(PYTHON) examples/readme.py)" = "city for australia"
	@echo "check-readme: examples/readme.py prints city for australia"

# SYSTEM_PYTHON: the python3 that makes it (needs python3-venv on Debian/Ubuntu).
SYSTEM_PYTHON ?= python3
venv: $(VENV)/.ready
$(VENV)/.ready: support/requirements-dev.txt
	$(SYSTEM_PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q -r support/requirements-dev.txt
	touch $@

# --fair-sched=yes: valgrind runs one thread at a time, and its default lock
# lets a thread that never blocks (a dispatch loop) starve the others forever.
check-memory: $(C_TESTS)
	@FLUX_TEST_UNDER_VALGRIND=1 $(SUITE) c-valgrind $(PYTHON) Tests/c/run.py \
	    --wrap "valgrind --quiet --fair-sched=yes --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite" \
	    $(C_TESTS)

# Counted, not timed: a regression adding work to every dispatch fails here
# (support/check-cost.py says why the budgets are what they are).
check-cost: $(B)/tests/cost
	@$(SUITE) cost $(PYTHON) support/check-cost.py $<

# --- sanitizers on the C side ------------------------------------------------
# libflux built again with a sanitizer, each in a scratch path of its own, and
# the C programs built against it with the Swift toolchain's clang (whose
# sanitizer runtimes match swiftc's). The executable carries the runtime; the
# library's __asan_*/__tsan_* references resolve to it. Swift has no UBSan
# mode (its arithmetic traps instead); the C side gets -fsanitize=undefined.
CLANG   ?= $(dir $(realpath $(shell command -v $(SWIFT))))clang
$(B)/asan/lib/$(SONAME): $(SWIFT_SOURCES) include/flux.h Makefile
	@$(if $(Q),echo "  SWIFT  $@ (AddressSanitizer, invariants checked)")
	$(call swift-lib,.build-asan,$(CHECKED_LIB_FLAGS) -Xswiftc -sanitize=address)
	@mkdir -p $(B)/asan/lib
	cp .build-asan/release/libflux.so $@
	ln -sf $(SONAME) $(B)/asan/lib/libflux.so

$(B)/tsan/lib/$(SONAME): $(SWIFT_SOURCES) include/flux.h Makefile
	@$(if $(Q),echo "  SWIFT  $@ (ThreadSanitizer, invariants checked)")
	$(call swift-lib,.build-tsan-lib,$(CHECKED_LIB_FLAGS) -Xswiftc -sanitize=thread)
	@mkdir -p $(B)/tsan/lib
	cp .build-tsan-lib/release/libflux.so $@
	ln -sf $(SONAME) $(B)/tsan/lib/libflux.so

ASAN_TESTS := $(patsubst Tests/c/%.c,$(B)/asan/tests/%,$(wildcard Tests/c/test-*.c))
ASAN_FLAGS := -fuse-ld=lld -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

$(B)/asan/tests/%: Tests/c/%.c Tests/c/*.h include/flux.h $(B)/asan/lib/$(SONAME)
	@mkdir -p $(B)/asan/tests
	$(Q)$(CLANG) $(TEST_CFLAGS) $(ASAN_FLAGS) -o $@ $< -L$(B)/asan/lib -lflux -Wl,-rpath,$(abspath $(B)/asan/lib)

# The toolchain's TSan runtime carries libdispatch interceptors, which need
# the toolchain's libdispatch and BlocksRuntime to link.
SWIFT_RUNTIME_DIR = $(dir $(CLANG))../lib/swift/linux
$(B)/tsan/tests/%: Tests/c/%.c Tests/c/*.h include/flux.h $(B)/tsan/lib/$(SONAME)
	@mkdir -p $(B)/tsan/tests
	$(Q)$(CLANG) $(TEST_CFLAGS) -fuse-ld=lld -fsanitize=thread -o $@ $< -L$(B)/tsan/lib -lflux -Wl,-rpath,$(abspath $(B)/tsan/lib) \
	    -L$(SWIFT_RUNTIME_DIR) -ldispatch -lBlocksRuntime -Wl,-rpath,$(realpath $(SWIFT_RUNTIME_DIR))

# The tests that replace malloc skip under a sanitizer (it owns malloc): they
# run against a library with the invariants checked and no sanitizer.
$(B)/checked/lib/$(SONAME): $(SWIFT_SOURCES) include/flux.h Makefile
	@$(if $(Q),echo "  SWIFT  $@ (invariants checked)")
	$(call swift-lib,.build-checked,$(CHECKED_LIB_FLAGS))
	@mkdir -p $(B)/checked/lib
	cp .build-checked/release/libflux.so $@
	ln -sf $(SONAME) $(B)/checked/lib/libflux.so

CHECKED_TESTS := $(patsubst %,$(B)/checked/tests/test-%,oom stores-nomem)
$(B)/checked/tests/%: Tests/c/%.c Tests/c/*.h include/flux.h $(B)/checked/lib/$(SONAME)
	@mkdir -p $(B)/checked/tests
	$(Q)$(CC) $(TEST_CFLAGS) -o $@ $< -L$(B)/checked/lib -lflux -Wl,-rpath,$(abspath $(B)/checked/lib)

# Leak checking on; the first report of either sanitizer fails the program.
# No fake stacks for use-after-return: they move locals off the thread's
# stack, and the depth check (flux.h, "Depth") measures the stack by a
# local's address.
check-address: $(ASAN_TESTS) $(CHECKED_TESTS)
	@ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=0 UBSAN_OPTIONS=print_stacktrace=1 \
	    $(SUITE) c-asan $(PYTHON) Tests/c/run.py $(ASAN_TESTS)
	@$(SUITE) c-checked $(PYTHON) Tests/c/run.py $(CHECKED_TESTS)

# The C tests with threads in them: dispatch, enqueue from other threads,
# observers set from another thread, stores read and changed across threads,
# every call made from another thread while one is parked in user code;
# three threads at once on one dispatcher, and dispatchers used together;
# a close racing a dispatch that waits; enqueues racing observer changes.
TSAN_C_TESTS := $(patsubst %,$(B)/tsan/tests/test-%,threads enqueue observer stores crossthread three dispatch interplay)
check-thread-c: $(TSAN_C_TESTS)
	@TSAN_OPTIONS=halt_on_error=1 $(SUITE) c-tsan $(PYTHON) Tests/c/run.py $^

# --- fuzzing ------------------------------------------------------------------
# libFuzzer targets (fuzz/*.c) against the ASan libflux, with ASan and UBSan
# on the target too. Each first replays its kept crashers and other
# regression inputs (fuzz/regressions/TARGET/), then fuzzes for FUZZ_SECONDS
# from the checked-in seeds (fuzz/corpus/TARGET/, read only: new inputs go
# to build/fuzz/corpus-TARGET). A crash stops the run; keep the input it
# leaves in build/fuzz/artifacts/ in fuzz/regressions/TARGET/ once fixed.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := ops signature stores
FUZZ_FLAGS   := -fuse-ld=lld -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_ENV     := ASAN_OPTIONS=detect_stack_use_after_return=0:detect_leaks=1:quarantine_size_mb=64

$(B)/fuzz/fuzz-%: fuzz/fuzz-%.c fuzz/model.h include/flux.h $(B)/asan/lib/$(SONAME)
	@mkdir -p $(B)/fuzz
	$(Q)$(CLANG) $(TEST_CFLAGS) $(FUZZ_FLAGS) -o $@ $< -L$(B)/asan/lib -lflux -Wl,-rpath,$(abspath $(B)/asan/lib)

fuzz: $(patsubst %,$(B)/fuzz/fuzz-%,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do \
	    log=$(B)/fuzz/fuzz-$$t.log; \
	    echo "== fuzz-$$t: regressions, then $(FUZZ_SECONDS) s of fuzzing (log: $$log) =="; \
	    mkdir -p $(B)/fuzz/corpus-$$t $(B)/fuzz/artifacts; \
	    $(FUZZ_ENV) $(B)/fuzz/fuzz-$$t fuzz/regressions/$$t/* > $$log 2>&1 \
	        || { tail -n 40 $$log; echo "fuzz-$$t: a regression input fails"; exit 1; }; \
	    $(FUZZ_ENV) $(B)/fuzz/fuzz-$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	        -artifact_prefix=$(B)/fuzz/artifacts/$$t- $(B)/fuzz/corpus-$$t fuzz/corpus/$$t > $$log 2>&1 \
	        || { tail -n 40 $$log; echo "fuzz-$$t: crashed; the input is in $(B)/fuzz/artifacts/"; exit 1; }; \
	    grep -E "^Done|stat::number_of_executed_units|stat::new_units_added" $$log; \
	done

# --- benchmarks ------------------------------------------------------------
# The plain-loop baseline, also as a shared object: like libflux, it then calls
# back across a library boundary (see bench/baseline.h).
$(B)/bench/libbaseline.so: bench/baseline.c bench/baseline-chain.c bench/baseline.h
	@mkdir -p $(B)/bench
	$(Q)$(CC) -O2 -std=c11 -fPIC -shared -pthread -DBASELINE_LOOP=baseline_loop_shared -o $@ \
	    bench/baseline.c bench/baseline-chain.c

$(B)/bench/bench: bench/bench.c bench/baseline.c bench/*.h include/flux.h $(LIB) $(B)/bench/libbaseline.so
	$(Q)$(CC) -O2 -std=c11 -D_GNU_SOURCE -Iinclude -pthread -o $@ bench/bench.c bench/baseline.c \
	    -L$(B)/bench -lbaseline -Wl,-rpath,$(abspath $(B)/bench) $(LINK_FLUX) -ldl

$(B)/bench/trampoline: bench/trampoline.c include/flux.h $(LIB)
	@mkdir -p $(B)/bench
	$(Q)$(CC) -O2 -std=c11 -D_GNU_SOURCE -Iinclude -pthread -o $@ $< $(LINK_FLUX)

$(B)/bench/stores: bench/stores.c bench/ratio.h include/flux.h $(LIB)
	@mkdir -p $(B)/bench
	$(Q)$(CC) -O2 -std=c11 -D_GNU_SOURCE -Iinclude -o $@ $< $(LINK_FLUX) -lm

bench: $(B)/bench/bench $(B)/bench/trampoline $(B)/bench/stores $(B)/bench/pydeps
	@echo "make bench: about 70 s; on $$(nproc) CPUs ($$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)),"
	@echo "  load average $$(cut -d' ' -f1-3 /proc/loadavg) at start, $$(date -u '+%Y-%m-%d %H:%M UTC')."
	@echo "  Each ratio is the median of interleaved rounds, (lowest-highest) beside it: rerun on an idle machine"
	@echo "  when the spread is wide. blinker (the Python yardstick) is fetched from PyPI into $(B)/bench/pydeps"
	@echo "  once; offline, its column is left out. VUEFLUX_SRC=/path/to/VueFlux (a checkout of"
	@echo "  github.com/ra1028/VueFlux) adds the Swift layer side by side with VueFlux's own sources."
	$(B)/bench/bench
	$(B)/bench/trampoline
	PYTHONPATH=bindings/python:$(B)/bench/pydeps $(PYTHON) bench/bench.py
	$(SWIFT) run -c release --quiet flux-bench-swift
	$(B)/bench/stores
	PYTHONPATH=bindings/python $(PYTHON) bench/stores.py
	@$(MAKE) --no-print-directory bench-vueflux

# The Swift layer side by side with VueFlux itself, in one process: VueFlux's
# own sources (VUEFLUX_SRC: a checkout's root, or the directory holding its
# VueFlux/, VueFluxReactive/ and VueFluxInternalCore/), never part of this
# repository, are copied with the Linux shims of bench/vueflux/shims into a
# scratch package under build/ (bench/vueflux/prepare.py) and built in release
# as their own modules, as a client's build has them, beside Flux;
# VUEFLUX_CMO=1 builds them with -cross-module-optimization.
VUEFLUX_SRC ?=
VUEFLUX_CMO ?=
bench-vueflux:
	@if [ -z "$(VUEFLUX_SRC)" ]; then \
	    echo "bench-vueflux: skipped (set VUEFLUX_SRC to a checkout of github.com/ra1028/VueFlux to run the Swift layer beside it)"; \
	else \
	    $(PYTHON) bench/vueflux/prepare.py $(if $(VUEFLUX_CMO),--cmo) "$(VUEFLUX_SRC)" "$(CURDIR)" $(B)/bench/vueflux && \
	    $(SWIFT) run -c release --quiet --package-path $(B)/bench/vueflux vueflux-bench; \
	fi

# Every bench built and run once, briefly (CI): a broken bench cannot land.
# The figures are meaningless; the output goes to build/bench/smoke.log.
bench-smoke: $(B)/bench/bench $(B)/bench/trampoline $(B)/bench/stores
	@{ FLUX_BENCH_SECONDS=0.002 FLUX_BENCH_REPEATS=1 $(B)/bench/bench && \
	   $(B)/bench/trampoline 20000 && \
	   FLUX_BENCH_REPEATS=1 FLUX_BENCH_CALLBACKS=2000 PYTHONPATH=bindings/python $(PYTHON) bench/bench.py && \
	   FLUX_BENCH_SECONDS=0.002 FLUX_BENCH_REPEATS=1 $(B)/bench/stores && \
	   FLUX_BENCH_REPEATS=1 FLUX_BENCH_DISPATCHES=200 PYTHONPATH=bindings/python $(PYTHON) bench/stores.py && \
	   $(MAKE) --no-print-directory bench-vueflux VUEFLUX_SRC= | grep '^bench-vueflux: skipped'; \
	 } > $(B)/bench/smoke.log 2>&1 || { cat $(B)/bench/smoke.log; echo "bench-smoke: FAILED"; exit 1; }
	@echo "bench-smoke: bench, trampoline, stores, bench.py and stores.py ran; bench-vueflux skips"
	@echo "  without VUEFLUX_SRC (build/bench/smoke.log)"

# blinker, the Python bench's signal-library yardstick, installed for the
# bench only (never imported by the package or its tests). Offline, the bench
# runs without it and says so.
$(B)/bench/pydeps:
	-$(PYTHON) -m pip install --quiet --disable-pip-version-check --target $@ blinker

# --- install ---------------------------------------------------------------
# The .pc and CMake files get the paths installed to (DESTDIR aside).
SUBST_PATHS = sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
    -e 's|@VERSION@|$(VERSION)|' -e 's|@MAJOR@|$(MAJOR)|' -e 's|@MINOR@|$(MINOR)|' \
    -e 's|@REALNAME@|$(REALNAME)|' -e 's|@SONAME@|$(SONAME)|'

install: $(LIB) $(B)/include/flux_cdef.h
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(CMAKEDIR) \
	    $(DESTDIR)$(DATADIR)/libflux
	install -m 0755 $(B)/lib/$(REALNAME) $(DESTDIR)$(LIBDIR)/$(REALNAME)
	ln -sf $(REALNAME) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(REALNAME) $(DESTDIR)$(LIBDIR)/libflux.so
	install -m 0644 include/flux.h $(DESTDIR)$(INCLUDEDIR)/flux.h
	install -m 0644 $(B)/include/flux_cdef.h $(DESTDIR)$(DATADIR)/libflux/flux_cdef.h
	$(SUBST_PATHS) support/flux.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/flux.pc
	$(SUBST_PATHS) support/cmake/libfluxConfig.cmake.in > $(DESTDIR)$(CMAKEDIR)/libfluxConfig.cmake
	$(SUBST_PATHS) support/cmake/libfluxConfigVersion.cmake.in > $(DESTDIR)$(CMAKEDIR)/libfluxConfigVersion.cmake
	chmod 0644 $(DESTDIR)$(PKGCONFIGDIR)/flux.pc $(DESTDIR)$(CMAKEDIR)/*.cmake

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/$(REALNAME) $(DESTDIR)$(LIBDIR)/$(SONAME) \
	      $(DESTDIR)$(LIBDIR)/libflux.so $(DESTDIR)$(INCLUDEDIR)/flux.h \
	      $(DESTDIR)$(PKGCONFIGDIR)/flux.pc \
	      $(DESTDIR)$(CMAKEDIR)/libfluxConfig.cmake $(DESTDIR)$(CMAKEDIR)/libfluxConfigVersion.cmake \
	      $(DESTDIR)$(DATADIR)/libflux/flux_cdef.h
	rmdir $(DESTDIR)$(CMAKEDIR) $(DESTDIR)$(DATADIR)/libflux 2>/dev/null || true

clean:
	rm -rf $(B) .build-lib .build-tsan .build-asan .build-tsan-lib .build-checked
	$(SWIFT) package clean
