# tandem: GNU Makefile. `make help` lists the targets.
#
# src/ has one folder per layer (docs/architecture.md, Layers); each flavour's
# object tree mirrors it: build/obj (normal), build/asan/obj (AddressSanitizer
# + UBSan) and build/fuzz/obj (libFuzzer, clang). The unit tests are one
# Criterion runner linking every tests/test_<module>.c against the module
# objects (never cli/main.o).

include scripts/pins.env

CC      ?= cc
OPT     ?= -O2 -g
CUDA    ?=
PYTHON  ?= python3

BUILD   := build
# -ffile-prefix-map: the same sources give the same binary in any checkout, so the fixtures,
# keyed by the binary (scripts/make-fixtures.sh), are reused by a clean clone of the same commit
CFLAGS_COMMON := -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -MMD -MP -iquote src -iquote $(BUILD)/gen \
                 -ffile-prefix-map=$(CURDIR)=.
# Library flags are expanded only inside recipes, after `make deps` had its chance.
LIBS_PC    = jansson:libjansson-dev libcrypto:libssl-dev libfyaml:libfyaml-dev libevent:libevent-dev \
             libcurl:libcurl4-openssl-dev libzstd:libzstd-dev sqlite3:libsqlite3-dev
LIB_CFLAGS = $(foreach l,$(LIBS_PC),$(call pkg,$(word 1,$(subst :, ,$(l))),$(word 2,$(subst :, ,$(l))),--cflags)) -pthread
LDLIBS     = $(foreach l,$(LIBS_PC),$(call pkg,$(word 1,$(subst :, ,$(l))),$(word 2,$(subst :, ,$(l))),--libs)) -pthread -ldl -lm
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_FLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

SRC      := $(wildcard src/*/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
VENV     := $(BUILD)/venv
PYTEST   := $(VENV)/bin/python -m pytest

# pkg-config lookups that name the Debian package when a library is missing.
# $(call pkg,NAME,DEBIAN-PACKAGE,--cflags|--libs)
pkg = $(if $(shell pkg-config --exists $(1) && echo yes),$(shell pkg-config $(3) $(1)),$(error $(1) not found by pkg-config: install the Debian package $(2) (or run `make deps`)))

.PHONY: all test check unit e2e e2e-parallel e2e-alone layers asan fuzz fuzz-quick fuzz-merge fuzz-replay fixtures deps venv run bench bench-plan soak clean help mcp-transcript \
        install uninstall
.DEFAULT_GOAL := all

all: $(BUILD)/tandem

help:
	@echo "make            build build/tandem"
	@echo "make test       install what is missing, check the include layers, build, run unit tests,"
	@echo "                replay the fuzz corpora, run end-to-end tests"
	@echo "make check      the quick tier: layers, unit tests, fuzz replays, end-to-end tests marked quick"
	@echo "                (docs/testing.md); make test is the gate"
	@echo "make e2e        the end-to-end suite (E2E=FILE narrows it, E2E_JOBS workers, default 2):"
	@echo "                make e2e-parallel, then make e2e-alone (the tests marked alone)"
	@echo "make layers     check that no include in src/ goes up a layer (docs/architecture.md, Layers)"
	@echo "make run        install, build, run the decide-then-verify demo (examples/demo.yaml)"
	@echo "make asan       unit tests, fuzz corpora, then the end-to-end suite, under AddressSanitizer + UBSan"
	@echo "make fuzz       fuzz the GGUF reader, config loader, System One checks, templates, HTTP router and head parser"
	@echo "                and MCP messages under ASan + UBSan, FUZZ_SECONDS (default 60) each"
	@echo "                (FUZZ_TARGETS picks some)"
	@echo "make fuzz-merge minimise the campaigns' corpora into tests/fuzz/corpus/<target>/"
	@echo "make fuzz-replay replay tests/fuzz/corpus/ through every target without libFuzzer (part of make test)"
	@echo "make fuzz-quick every fuzz target for FUZZ_QUICK_SECONDS (default 3) (part of make test)"
	@echo "make deps       system packages, pinned engine (CUDA=1 for a CUDA build), test models, venv"
	@echo "make fixtures   build the decision-model fixtures into ~/.cache/tandem/fixtures"
	@echo "make bench      benchmarks; tables land in docs/"
	@echo "make mcp-transcript  record a real MCP session with tandem mcp into docs/mcp.md"
	@echo "make soak       the chaos soak: load, seeded faults, invariants, for SOAK_S seconds (default 300);"
	@echo "                its table lands in docs/reliability.md"
	@echo "make bench-plan the planner against the engine's own buffers (docs/planner-accuracy.md)"
	@echo "make install    build/tandem, the pinned engine, the systemd unit and an example config into"
	@echo "                \$$(DESTDIR)\$$(PREFIX) (default /usr/local); needs \`make deps\` first (docs/install.md)"
	@echo "make uninstall  remove what make install put there (a changed config stays)"
	@echo "make clean      remove build/ (the cache in ~/.cache/tandem stays)"

# --- generated header: the pins the binary reports -------------------------
$(BUILD)/gen/version.h: scripts/pins.env
	@mkdir -p $(@D)
	@printf '%s\n' '/* generated from scripts/pins.env by the Makefile; do not edit */' \
	  '#define TANDEM_VERSION "$(TANDEM_VERSION)"' \
	  '#define TANDEM_ENGINE_BUILD $(ENGINE_BUILD)' \
	  '#define TANDEM_ENGINE_COMMIT "$(ENGINE_COMMIT)"' > $@.tmp && mv $@.tmp $@

# --- generated headers: files the binary serves --------------------------------
# $(call embed,NAME,FILE): FILE's bytes as `static const unsigned char NAME[]`.
# docs/openapi.yaml (GET /openapi.yaml) and the dashboard's files (GET /ui, ui/*)
# are included by src/serve/api.c only, so the binary needs no file at run time.
embed = { echo 'static const unsigned char $(1)[] = {'; \
	  od -An -v -tx1 $(2) | sed 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; echo '};'; }

UI_FILES := ui/index.html ui/app.css ui/app.js

$(BUILD)/gen/openapi_yaml.h: docs/openapi.yaml
	@mkdir -p $(@D)
	@{ echo '/* generated from docs/openapi.yaml by the Makefile; do not edit */'; \
	  $(call embed,openapi_yaml,$<); } > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/ui_assets.h: $(UI_FILES)
	@mkdir -p $(@D)
	@{ echo '/* generated from ui/ by the Makefile; do not edit */'; \
	  $(call embed,ui_index_html,ui/index.html); \
	  $(call embed,ui_app_css,ui/app.css); \
	  $(call embed,ui_app_js,ui/app.js); } > $@.tmp && mv $@.tmp $@

# --- objects, binaries and the unit runner, for one flavour ------------------
# $(call flavour,DIR,EXTRA-CFLAGS[,COMPILER])
define flavour
$(1)/obj/%.o: src/%.c $(BUILD)/gen/version.h
	@mkdir -p $$(@D)
	$(or $(3),$$(CC)) $$(CFLAGS_COMMON) $$(OPT) $(2) $$(LIB_CFLAGS) -c -o $$@ $$<

$(1)/tests/%.o: tests/%.c $(BUILD)/gen/version.h
	@mkdir -p $$(@D)
	$$(CC) $$(CFLAGS_COMMON) $$(OPT) $(2) $$(LIB_CFLAGS) $$(call pkg,criterion,libcriterion-dev,--cflags) -c -o $$@ $$<

$(1)/obj/serve/api.o: $(BUILD)/gen/openapi_yaml.h $(BUILD)/gen/ui_assets.h

$(1)/tandem: $(SRC:src/%.c=$(1)/obj/%.o)
	$$(CC) $(2) -o $$@ $$^ $$(LDLIBS)

$(1)/tests/unit: $(filter-out $(1)/obj/cli/main.o,$(SRC:src/%.c=$(1)/obj/%.o)) $(TEST_SRC:tests/%.c=$(1)/tests/%.o)
	$$(CC) $(2) -o $$@ $$^ $$(call pkg,criterion,libcriterion-dev,--libs) $$(LDLIBS)
endef

# A test helper, not part of the unit runner: prints a prom registry for the
# official Python parser (tests/e2e/test_prom_format.py).
$(BUILD)/tests/prom_dump: $(BUILD)/tests/prom_dump.o $(BUILD)/obj/serve/prom.o $(BUILD)/obj/base/mem.o $(BUILD)/obj/base/err.o $(BUILD)/obj/base/utf8.o
	$(CC) -o $@ $^

$(eval $(call flavour,$(BUILD),))
$(eval $(call flavour,$(BUILD)/asan,$(ASAN_FLAGS)))
$(eval $(call flavour,$(BUILD)/fuzz,$(FUZZ_FLAGS),clang))

# --- fuzzing: libFuzzer + ASan + UBSan --------------------------------------------
# One target per parser or boundary, tests/fuzz/fuzz_<name>.c: gguf (the GGUF
# reader), config (tandem.yaml), s1 (the System One request checks), tmpl (the
# template language), http (raw requests through the router, no socket), head
# (the server's request-head parser, serve/http_head.c), mcp (MCP messages,
# tool results and the catalog, serve/mcp.c), feedback (POST /v1/feedback bodies
# through the request store's checks, serve/store_feedback.c).
# `make fuzz` runs each of FUZZ_TARGETS for FUZZ_SECONDS on its working corpus
# build/fuzz/corpus/<name>/, starting from the checked-in corpus
# tests/fuzz/corpus/<name>/ and the seeds tests/fuzz/make_seeds.py writes;
# crashes land in build/fuzz/crashes/<name>-*. `make fuzz-merge` minimises all
# of it (libFuzzer -merge=1) back into tests/fuzz/corpus/<name>/, which
# `make test` (fuzz-replay) and `make asan` replay without clang: the target
# linked with the plain main() of tests/fuzz/replay.c.
FUZZ_SECONDS ?= 60
FUZZ_NAMES   := gguf config s1 tmpl http head mcp feedback
FUZZ_TARGETS ?= $(FUZZ_NAMES)
FUZZ_LIB_OBJ = $(filter-out $(BUILD)/fuzz/obj/cli/%,$(SRC:src/%.c=$(BUILD)/fuzz/obj/%.o))
# Longest input per target: a GGUF header with its first tensors; a request
# a little over the http target's 8 KiB body limit. The checked-in GGUF corpus
# is cut to FUZZ_KEEP_LEN_gguf so that it stays small.
FUZZ_LEN_gguf := 262144
FUZZ_LEN_http := 16384
FUZZ_KEEP_LEN_gguf := 65536
# The config target's sanitizer settings: LeakSanitizer's suppressions (a leak inside libfyaml,
# tests/fuzz/lsan.supp), matched on whole allocation stacks (the fast unwinder stops at a
# library built without frame pointers; the slow one costs executions, so only here).
FUZZ_ENV_config := ASAN_OPTIONS=fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/fuzz/lsan.supp
fuzz_len = $(or $(FUZZ_LEN_$(1)),65536)
fuzz_keep_len = $(or $(FUZZ_KEEP_LEN_$(1)),$(call fuzz_len,$(1)))

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_LIB_OBJ)
	clang $(CFLAGS_COMMON) -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all $(LIB_CFLAGS) -o $@ $(filter %.c %.o,$^) $(LDLIBS)

# $(call fuzz_run,NAME): one campaign
define fuzz_run
	@mkdir -p $(BUILD)/fuzz/corpus/$(1) tests/fuzz/corpus/$(1)
	$(FUZZ_ENV_$(1)) $(BUILD)/fuzz/fuzz_$(1) -max_total_time=$(FUZZ_SECONDS) -max_len=$(call fuzz_len,$(1)) -timeout=10 \
	  -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix=$(BUILD)/fuzz/crashes/$(1)- \
	  $(BUILD)/fuzz/corpus/$(1) tests/fuzz/corpus/$(1) $(BUILD)/fuzz/seeds/$(1)

endef

# $(call fuzz_quick_run,NAME): a campaign of FUZZ_QUICK_SECONDS whose output goes to
# build/fuzz/logs/NAME.log; one line says how it went, a failure shows the log's end
define fuzz_quick_run
	@mkdir -p $(BUILD)/fuzz/corpus/$(1) $(BUILD)/fuzz/logs
	@$(FUZZ_ENV_$(1)) $(BUILD)/fuzz/fuzz_$(1) -max_total_time=$(FUZZ_QUICK_SECONDS) -max_len=$(call fuzz_len,$(1)) -timeout=10 -rss_limit_mb=4096 -artifact_prefix=$(BUILD)/fuzz/crashes/$(1)- $(BUILD)/fuzz/corpus/$(1) tests/fuzz/corpus/$(1) $(BUILD)/fuzz/seeds/$(1) > $(BUILD)/fuzz/logs/$(1).log 2>&1 || { tail -n 40 $(BUILD)/fuzz/logs/$(1).log; echo "fuzz-quick: $(1) failed: $(BUILD)/fuzz/logs/$(1).log; the input is in $(BUILD)/fuzz/crashes/" >&2; exit 1; }
	@echo "fuzz-quick: $(1): $$(grep -o 'Done [0-9]* runs' $(BUILD)/fuzz/logs/$(1).log) in $(FUZZ_QUICK_SECONDS) s, no failure"

endef

fuzz: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%) venv
	@$(VENV)/bin/python tests/fuzz/make_seeds.py $(BUILD)/fuzz/seeds
	@mkdir -p $(BUILD)/fuzz/crashes
	$(foreach t,$(FUZZ_TARGETS),$(call fuzz_run,$(t)))

# $(call fuzz_merge,NAME): the smallest set of inputs with the coverage of all
define fuzz_merge
	@rm -rf $(BUILD)/fuzz/merged/$(1) && mkdir -p $(BUILD)/fuzz/merged/$(1) $(BUILD)/fuzz/corpus/$(1) tests/fuzz/corpus/$(1)
	$(FUZZ_ENV_$(1)) $(BUILD)/fuzz/fuzz_$(1) -merge=1 -max_len=$(call fuzz_keep_len,$(1)) -timeout=10 -rss_limit_mb=4096 \
	  $(BUILD)/fuzz/merged/$(1) tests/fuzz/corpus/$(1) $(BUILD)/fuzz/corpus/$(1) $(BUILD)/fuzz/seeds/$(1)
	@rm -rf tests/fuzz/corpus/$(1) && mv $(BUILD)/fuzz/merged/$(1) tests/fuzz/corpus/$(1)
	@echo "fuzz-merge: tests/fuzz/corpus/$(1): $$(ls tests/fuzz/corpus/$(1) | wc -l) files, $$(du -sb tests/fuzz/corpus/$(1) | cut -f1) bytes"

endef

fuzz-merge: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%) venv
	@$(VENV)/bin/python tests/fuzz/make_seeds.py $(BUILD)/fuzz/seeds
	$(foreach t,$(FUZZ_TARGETS),$(call fuzz_merge,$(t)))

# The checked-in corpora replayed through each target built with $(CC) against
# a flavour's objects: $(call fuzz_replay,DIR,EXTRA-CFLAGS)
define fuzz_replay
$(1)/tests/fuzz/replay_%: $(1)/tests/fuzz/replay.o $(1)/tests/fuzz/fuzz_%.o $(filter-out $(1)/obj/cli/%,$(SRC:src/%.c=$(1)/obj/%.o))
	$$(CC) $(2) -o $$@ $$^ $$(LDLIBS)
endef
$(eval $(call fuzz_replay,$(BUILD),))
$(eval $(call fuzz_replay,$(BUILD)/asan,$(ASAN_FLAGS)))

fuzz-replay: $(FUZZ_NAMES:%=$(BUILD)/tests/fuzz/replay_%)
	@for t in $(FUZZ_NAMES); do $(BUILD)/tests/fuzz/replay_$$t tests/fuzz/corpus/$$t || exit 1; done

# --- dependencies: packages, engine, models, Python -------------------------
deps:
	@scripts/install-deps.sh
	@$(if $(CUDA),CUDA=$(CUDA) )scripts/build-engine.sh
	@scripts/fetch-models.sh
	@scripts/fetch-envoy.sh
	@$(MAKE) --no-print-directory venv

venv: $(VENV)/.stamp
$(VENV)/.stamp: tests/e2e/requirements.txt
	@echo "venv: $(VENV) with $$(tr '\n' ' ' < $<)"
	@$(PYTHON) -m venv $(VENV)
	@$(VENV)/bin/python -m pip install -q --disable-pip-version-check -r $<
	@touch $@

# --- install: tandem, its engine, the systemd unit ---------------------------------
# `make install` copies into $(DESTDIR)$(PREFIX) (docs/install.md):
#   bin/tandem                          INSTALL_BIN (default build/tandem, built if stale)
#   libexec/tandem/llama-server, llama-quantize, llama-imatrix, BUILD-INFO
#                                       the pinned engine, from ENGINE_DIR (the cache)
#   lib/systemd/system/tandem.service   examples/tandem.service, @BINDIR@, @SYSCONFDIR@
#                                       and @DOCDIR@ replaced by the installed paths
#   share/doc/tandem/                   serve.md, config.md, examples/tandem.yaml
# and $(SYSCONFDIR)/tandem/tandem.yaml, the example, only when no config is there.
# tandem finds its engine as ../libexec/tandem/llama-server from its own binary
# (src/engine/engine.c), so bin/ and libexec/ are not separately configurable. The
# engine is a static build (BUILD_SHARED_LIBS=OFF: no libllama/libggml, no RPATH; only
# system libraries), so a copy runs anywhere; install checks with ldd, without
# LD_LIBRARY_PATH, that they resolve (a CUDA engine also needs the CUDA runtime and driver).
# `make uninstall` removes those files (the config only while it is byte-identical
# to the example) and the tandem folders it leaves empty; never the shared parents.
PREFIX      ?= /usr/local
SYSCONFDIR  ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR     ?= $(PREFIX)/lib/systemd/system
DOCDIR      ?= $(PREFIX)/share/doc/tandem
INSTALL_BIN ?= $(BUILD)/tandem
ENGINE_DIR  ?= $(or $(TANDEM_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tandem)/engine/b$(ENGINE_BUILD)
LIBEXECDIR  := $(PREFIX)/libexec/tandem
INSTALL_DOCS := docs/serve.md docs/config.md
I_CONF      := $(DESTDIR)$(SYSCONFDIR)/tandem/tandem.yaml
I_EXAMPLE   := $(DESTDIR)$(DOCDIR)/examples/tandem.yaml
I_UNIT      := $(DESTDIR)$(UNITDIR)/tandem.service

install: $(INSTALL_BIN)
	@test -x $(ENGINE_DIR)/bin/llama-server || { echo "make install: no engine at" \
	  "$(ENGINE_DIR)/bin/llama-server: run \`make deps\` first, or name the cache that" \
	  "holds it (TANDEM_CACHE=DIR or ENGINE_DIR=DIR; under sudo, HOME is root's)" >&2; exit 1; }
	install -D -m 755 $(INSTALL_BIN) $(DESTDIR)$(PREFIX)/bin/tandem
	install -D -m 755 $(ENGINE_DIR)/bin/llama-server $(DESTDIR)$(LIBEXECDIR)/llama-server
	@for t in llama-quantize llama-imatrix; do \
	  if [ -x $(ENGINE_DIR)/bin/$$t ]; then \
	    echo "install -D -m 755 $(ENGINE_DIR)/bin/$$t $(DESTDIR)$(LIBEXECDIR)/$$t"; \
	    install -D -m 755 $(ENGINE_DIR)/bin/$$t $(DESTDIR)$(LIBEXECDIR)/$$t; \
	  else echo "make install: note: $(ENGINE_DIR) has no $$t; \`tandem quantize\` and" \
	    "\`tandem imatrix\` need it (make deps adds it)"; fi; \
	done
	install -D -m 644 $(ENGINE_DIR)/BUILD-INFO $(DESTDIR)$(LIBEXECDIR)/BUILD-INFO
	install -d -m 755 $(dir $(I_UNIT))
	sed -e 's|@BINDIR@|$(PREFIX)/bin|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
	  -e 's|@DOCDIR@|$(DOCDIR)|g' examples/tandem.service > $(I_UNIT).tmp
	@! grep -n '@[A-Z_]*@' $(I_UNIT).tmp || { rm -f $(I_UNIT).tmp; \
	  echo "make install: examples/tandem.service: a placeholder left unreplaced (above)" >&2; exit 1; }
	chmod 644 $(I_UNIT).tmp && mv $(I_UNIT).tmp $(I_UNIT)
	install -D -m 644 -t $(DESTDIR)$(DOCDIR) $(INSTALL_DOCS)
	install -D -m 644 examples/tandem.yaml $(I_EXAMPLE)
	@if [ -e $(I_CONF) ]; then echo "make install: kept the existing $(I_CONF)"; else \
	  echo "install -D -m 644 examples/tandem.yaml $(I_CONF)"; \
	  install -D -m 644 examples/tandem.yaml $(I_CONF); fi
	@missing=$$(env -u LD_LIBRARY_PATH ldd $(DESTDIR)$(LIBEXECDIR)/llama-server 2>&1 | grep 'not found'); \
	  [ -z "$$missing" ] || printf '%s\n' "make install: warning: the engine needs libraries" \
	  "this machine lacks (fine if it is meant for another machine):" "$$missing" >&2
	@echo "make install: done; then: systemctl daemon-reload && systemctl enable --now tandem"

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/tandem $(I_UNIT) $(I_UNIT).tmp \
	  $(addprefix $(DESTDIR)$(LIBEXECDIR)/,llama-server llama-quantize llama-imatrix BUILD-INFO) \
	  $(addprefix $(DESTDIR)$(DOCDIR)/,$(notdir $(INSTALL_DOCS)))
	@if [ -f $(I_CONF) ] && ! cmp -s $(I_CONF) $(I_EXAMPLE) && ! cmp -s $(I_CONF) examples/tandem.yaml; \
	  then echo "make uninstall: kept $(I_CONF): it differs from the example"; \
	  else echo "rm -f $(I_CONF)"; rm -f $(I_CONF); fi
	rm -f $(I_EXAMPLE)
	@for d in $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) $(DESTDIR)$(LIBEXECDIR) \
	  $(DESTDIR)$(SYSCONFDIR)/tandem; do [ ! -d $$d ] || rmdir --ignore-fail-on-non-empty $$d; done
	@[ ! -L $(DESTDIR)/etc/systemd/system/multi-user.target.wants/tandem.service ] || echo \
	  "make uninstall: tandem.service is still enabled: systemctl disable --now tandem"

# --- tests --------------------------------------------------------------------
# The include-layer rule, read from docs/architecture.md's Layers table; the
# self-test first proves that the check refuses each kind of violation.
layers:
	@$(PYTHON) scripts/check-layers.py --self-test
	@$(PYTHON) scripts/check-layers.py

# Each part of `make test` and `make check` leaves a JUnit file in RESULTS;
# scripts/test-report.py ends the run with their counts, the wall time and the
# slowest end-to-end tests (docs/testing.md).
RESULTS := $(BUILD)/test-results
unit: $(BUILD)/tests/unit
	@mkdir -p $(RESULTS)
	$(BUILD)/tests/unit --xml=$(RESULTS)/unit.xml

# The end-to-end suite (docs/testing.md): first every test not marked `alone`,
# spread over E2E_JOBS pytest-xdist workers of one CPU each, then the `alone`
# tests one at a time on the idle machine. E2E narrows it (a file, a -k ...);
# E2E_MARK adds a marker expression (make check: quick).
E2E_JOBS ?= 2
E2E      ?= tests/e2e
# $(call e2e_parallel,TANDEM-BINARY,ENV) and $(call e2e_alone,...): the two parts;
# pytest's 5 is "nothing selected"
define e2e_parallel
	@mkdir -p $(RESULTS) && rm -f $(RESULTS)/e2e*.xml
	$(2) TANDEM_BIN=$(abspath $(1)) $(PYTEST) $(E2E) -m "not alone$(if $(E2E_MARK), and $(E2E_MARK))" \
	  -n $(E2E_JOBS) --dist loadfile --no-loadscope-reorder --junitxml=$(RESULTS)/e2e.xml
endef
define e2e_alone
	$(2) TANDEM_BIN=$(abspath $(1)) $(PYTEST) $(E2E) -m "alone$(if $(E2E_MARK), and $(E2E_MARK))" \
	  --junitxml=$(RESULTS)/e2e-alone.xml || [ $$? -eq 5 ]
endef

e2e: $(BUILD)/tandem $(BUILD)/tests/prom_dump venv
	$(call e2e_parallel,$(BUILD)/tandem,)
	$(call e2e_alone,$(BUILD)/tandem,)
e2e-parallel: $(BUILD)/tandem $(BUILD)/tests/prom_dump venv
	$(call e2e_parallel,$(BUILD)/tandem,)
e2e-alone: $(BUILD)/tandem $(BUILD)/tests/prom_dump venv
	$(call e2e_alone,$(BUILD)/tandem,)

fixtures: $(BUILD)/tandem
	@scripts/make-fixtures.sh $(abspath $(BUILD)/tandem)

# Every fuzz target for FUZZ_QUICK_SECONDS from its corpus (and the seeds), so
# that a change which breaks a harness's invariant fails in the change that made
# it; `make fuzz` is the long campaign.
FUZZ_QUICK_SECONDS ?= 3
fuzz-quick: $(FUZZ_NAMES:%=$(BUILD)/fuzz/fuzz_%) venv
	@$(VENV)/bin/python tests/fuzz/make_seeds.py $(BUILD)/fuzz/seeds
	@mkdir -p $(BUILD)/fuzz/crashes
	$(foreach t,$(FUZZ_NAMES),$(call fuzz_quick_run,$(t)))

# `make test`: everything, from whatever is missing; its budget is 10 minutes
# warm on two cores (docs/testing.md). `make check` is the quick tier.
# $(call tests_begin) and $(call tests_end,BUDGET-SECONDS): the clock and the report
tests_begin = @mkdir -p $(RESULTS) && rm -f $(RESULTS)/*.xml && date +%s > $(RESULTS)/started
tests_end = @$(VENV)/bin/python scripts/test-report.py --started $$(cat $(RESULTS)/started) \
	  --budget $(1) $(RESULTS)/*.xml

# what the tests run, built in parallel (make fuzz-quick builds the libFuzzer targets)
TESTED_BINARIES = all $(BUILD)/tests/unit $(BUILD)/tests/prom_dump $(FUZZ_NAMES:%=$(BUILD)/tests/fuzz/replay_%)

# The libFuzzer targets are built and their short campaigns run beside the parallel
# end-to-end part, at a lower priority (nice 10): they take the CPU time its waits
# leave, and they are done before the `alone` part, which needs an idle machine.
test:
	$(call tests_begin)
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory layers
	@$(MAKE) --no-print-directory -j2 $(TESTED_BINARIES)
	@$(MAKE) --no-print-directory fixtures
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory fuzz-replay
	@echo "fuzz-quick: beside the end-to-end tests; its output follows them"
	@nice -n 10 $(MAKE) --no-print-directory fuzz-quick > $(RESULTS)/fuzz-quick.log 2>&1 & \
	  fuzz=$$!; $(MAKE) --no-print-directory e2e-parallel; e2e=$$?; \
	  wait $$fuzz; quick=$$?; cat $(RESULTS)/fuzz-quick.log; [ $$e2e -eq 0 ] && [ $$quick -eq 0 ]
	@$(MAKE) --no-print-directory e2e-alone
	$(call tests_end,600)

check: venv
	$(call tests_begin)
	@$(MAKE) --no-print-directory layers
	@$(MAKE) --no-print-directory -j2 $(TESTED_BINARIES)
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory fuzz-replay
	@$(MAKE) --no-print-directory e2e E2E_MARK=quick
	$(call tests_end,180)

# The unit tests, the fuzz corpora (tests/fuzz/replay.c), then the whole
# end-to-end suite driving an instrumented build/asan/tandem (the engine is not
# instrumented); a sanitizer report fails the test whose tandem printed it
# (tests/e2e/conftest.py).
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
asan: $(BUILD)/asan/tests/unit $(BUILD)/asan/tandem $(BUILD)/tests/prom_dump \
      $(FUZZ_NAMES:%=$(BUILD)/asan/tests/fuzz/replay_%) venv
	$(ASAN_ENV) $(BUILD)/asan/tests/unit
	@for t in $(FUZZ_NAMES); do $(ASAN_ENV) $(BUILD)/asan/tests/fuzz/replay_$$t tests/fuzz/corpus/$$t || exit 1; done
	$(call e2e_parallel,$(BUILD)/asan/tandem,$(ASAN_ENV))
	$(call e2e_alone,$(BUILD)/asan/tandem,$(ASAN_ENV))

# The embedded default: examples/demo.yaml's decide-then-verify pipeline on
# the shipped request, through `tandem decide`, which starts a private daemon
# (and its two engines), prints the verdict and stops them (README, "make run").
run: deps all
	@$(MAKE) --no-print-directory fixtures
	@echo "make run: tandem decide on examples/demo.yaml (SmolLM2 decides, Gemma-3 verifies, CPU)"
	@echo "make run: request examples/requests/pressure.json; the daemon's log follows on stderr"
	@$(BUILD)/tandem decide --config examples/demo.yaml --pipeline decide \
	  --request examples/requests/pressure.json --private --verbose --human; \
	  rc=$$?; echo "make run: tandem decide exited $$rc (0 accepted, 3 rejected, 4 escalated)"; \
	  test $$rc -eq 0 -o $$rc -eq 3 -o $$rc -eq 4

# docs/mcp.md's "A real session": `tandem mcp` on examples/demo.yaml, as an agent drives it.
mcp-transcript: all
	@$(MAKE) --no-print-directory fixtures
	@$(PYTHON) scripts/mcp-transcript.py

bench: deps all bench-plan
	$(VENV)/bin/python bench/engine_start.py --out docs/bench-engine-start.md
	$(VENV)/bin/python bench/inspect_large.py --tandem $(BUILD)/tandem --out docs/bench-inspect-large.md
	$(VENV)/bin/python bench/serve_bench.py --tandem $(BUILD)/tandem --out docs/benchmarks.md
	$(VENV)/bin/python bench/pipeline_bench.py --tandem $(BUILD)/tandem --out docs/benchmarks.md
	$(VENV)/bin/python bench/cache_bench.py --tandem $(BUILD)/tandem --out docs/benchmarks.md
	$(VENV)/bin/python bench/store_bench.py --tandem $(BUILD)/tandem --out docs/benchmarks.md
	$(VENV)/bin/python bench/swap_bench.py --tandem $(BUILD)/tandem --out docs/benchmarks.md
	$(VENV)/bin/python bench/placement_bench.py --tandem $(BUILD)/tandem --out docs/benchmarks.md
	$(VENV)/bin/python bench/scaleout_bench.py --tandem $(BUILD)/tandem --out docs/benchmarks.md
	$(VENV)/bin/python bench/load_progress.py --out docs/benchmarks.md
	$(VENV)/bin/python bench/determinism_bench.py --tandem $(BUILD)/tandem --out docs/benchmarks.md
	$(VENV)/bin/python bench/mcp_bench.py --tandem $(BUILD)/tandem --out docs/benchmarks.md
	$(VENV)/bin/python bench/ladder_bench.py --tandem $(BUILD)/tandem --out docs/quantize.md

# The chaos soak (tests/soak/soak.py): real clients on two rotating fixtures and
# a pipeline while engines are killed and stopped, configs reloaded, clients
# hang up, the audit disk fills...; exits non-zero naming a broken invariant.
SOAK_S ?= 300
soak: deps all
	@$(MAKE) --no-print-directory fixtures
	$(VENV)/bin/python tests/soak/soak.py --tandem $(BUILD)/tandem --seconds $(SOAK_S) \
	  --out docs/reliability.md

bench-plan: deps all
	@$(MAKE) --no-print-directory fixtures
	$(VENV)/bin/python bench/plan_accuracy.py --tandem $(BUILD)/tandem --out docs/planner-accuracy.md

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
