# hyla build.  `make` builds build/hyla and build/libhyla.a; `make asan` the sanitizer build in
# build-asan/; `make test` runs the whole test suite (tests/run.sh).
# Options: ARCH=-march=x86-64-v3 (e.g. for valgrind), HYLA_GEMM=dnnl|openblas, BUILD=dir.

CC      ?= gcc
ARCH    ?= -march=native
OPT     ?= -O2
BUILD   ?= build
HYLA_GEMM ?= dnnl
EXTRA   ?=

CFLAGS  := -std=c11 $(OPT) $(ARCH) -fopenmp -Wall -Wextra -Wshadow -Wno-unused-parameter \
           -D_GNU_SOURCE -Isrc -Iinclude $(EXTRA)
LDLIBS  := -lcjson -lpcre2-8 -lm -lpthread -ldnnl   # oneDNN: fp32 GEMM (default) and bf16 matmul (always)

ifeq ($(HYLA_GEMM),openblas)
  CFLAGS += -DHYLA_GEMM_OPENBLAS -I/usr/include/x86_64-linux-gnu/openblas-pthread
  LDLIBS += -lopenblas
endif

LIB_SRC  := $(sort $(wildcard src/core/*.c src/io/*.c src/ops/*.c src/model/*.c src/engine/*.c src/train/*.c src/infer/*.c))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCHES  := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.PHONY: all asan test run clean tests benches
all: $(BUILD)/hyla $(BUILD)/libhyla.a tests benches
tests: $(TESTS)
benches: $(BENCHES)

$(BUILD)/libhyla.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	ar rcs $@ $^

$(BUILD)/hyla: $(CLI_OBJ) $(BUILD)/libhyla.a
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libhyla.a $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libhyla.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libhyla.a $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libhyla.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I/usr/include/x86_64-linux-gnu/openblas-pthread -o $@ $< $(BUILD)/libhyla.a $(LDLIBS) -lopenblas

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

asan:
	$(MAKE) BUILD=build-asan OPT=-O1 EXTRA="-g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" all

test:
	./tests/run.sh

run:
	./run.sh

clean:
	rm -rf build build-asan

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)

# ---- fuzzing (clang + libFuzzer): `make fuzz` builds build-fuzz/fuzz/fuzz_* from tests/fuzz/fuzz_*.c
# against the library compiled with clang and the sanitizers into build-fuzz/ (a separate object
# dir). tests/fuzz/smoke.sh [SECONDS] builds, makes the seed corpora and runs every harness.
FUZZ_CC    ?= clang
FUZZ_BUILD := build-fuzz
FUZZ_SRC   := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS  := $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_BUILD)/fuzz/%)
FUZZ_CFLAGS := -std=c11 -g -O1 $(ARCH) -fopenmp -D_GNU_SOURCE -Isrc -Iinclude -Wall -Wextra \
               -Wno-unused-parameter -fno-omit-frame-pointer \
               -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined

.PHONY: fuzz fuzz-bins fuzz-clean
fuzz:
	@mkdir -p $(FUZZ_BUILD) && echo '*' > $(FUZZ_BUILD)/.gitignore
	$(MAKE) BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) OPT=-O1 \
	    EXTRA="-g -fno-omit-frame-pointer -Wno-pass-failed -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" \
	    $(FUZZ_BUILD)/libhyla.a
	$(MAKE) fuzz-bins

fuzz-bins: $(FUZZ_BINS)

$(FUZZ_BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz_util.h $(FUZZ_BUILD)/libhyla.a
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_BUILD)/libhyla.a $(LDLIBS)

fuzz-clean:
	rm -rf $(FUZZ_BUILD) build/fuzz
