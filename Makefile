# hyla build.  `make` builds build/hyla, build/libhyla.a and build/libhyla.so; `make asan` the
# sanitizer build in build-asan/; `make test` runs the whole test suite (tests/run.sh);
# `make install PREFIX=DIR` installs the binary, both libraries, include/hyla.h and hyla.pc.
# Options: ARCH=-march=x86-64-v3 (e.g. for valgrind), HYLA_GEMM=dnnl|openblas, BUILD=dir.

CC      ?= gcc
ARCH    ?= -march=native
OPT     ?= -O2
BUILD   ?= build
HYLA_GEMM ?= dnnl
EXTRA   ?=

CFLAGS  := -std=c11 $(OPT) $(ARCH) -fno-math-errno -fopenmp -fPIC -Wall -Wextra -Wshadow -Wno-unused-parameter \
           -D_GNU_SOURCE -Isrc -Iinclude $(EXTRA)
LDLIBS  := -lcjson -lpcre2-8 -lutf8proc -lm -lpthread -ldnnl   # oneDNN: fp32 GEMM (default) and bf16 matmul (always)

ifeq ($(HYLA_GEMM),openblas)
  CFLAGS += -DHYLA_GEMM_OPENBLAS -I/usr/include/x86_64-linux-gnu/openblas-pthread
  LDLIBS += -lopenblas
endif

# MPI (OpenMPI) is linked into the binary only: its communicator (src/parallel/comm_mpi.c) is the one
# library-folder file built into the binary, so libhyla and its users need no MPI.
MPI_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS   := $(shell pkg-config --libs ompi-c 2>/dev/null || echo -lmpi)
MPI_SRC  := src/parallel/comm_mpi.c
LIB_SRC  := $(filter-out $(MPI_SRC),$(sort $(wildcard src/core/*.c src/io/*.c src/parallel/*.c src/ops/*.c src/model/*.c \
              src/engine/*.c src/train/*.c src/infer/*.c src/api/*.c)))
CLI_SRC  := $(sort $(wildcard src/cli/*.c src/serve/*.c)) $(MPI_SRC)   # the server is part of the binary, not the library
TEST_SRC := $(sort $(wildcard tests/*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCHES  := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.PHONY: all asan test run clean tests benches install
all: $(BUILD)/hyla $(BUILD)/libhyla.a $(BUILD)/libhyla.so tests benches
tests: $(TESTS) $(BUILD)/mpi/test_train_mpi
benches: $(BENCHES)

$(BUILD)/libhyla.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	ar rcs $@ $^

VERSION := $(shell sed -n 's/^\#define HYLA_VERSION_STRING "\(.*\)"/\1/p' include/hyla.h)

$(BUILD)/libhyla.so: $(LIB_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -shared -Wl,-soname,libhyla.so.$(firstword $(subst ., ,$(VERSION))) -o $@ $^ $(LDLIBS)

PREFIX ?= /usr/local
install: $(BUILD)/hyla $(BUILD)/libhyla.a $(BUILD)/libhyla.so
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 755 $(BUILD)/hyla $(DESTDIR)$(PREFIX)/bin/hyla
	install -m 644 $(BUILD)/libhyla.a $(DESTDIR)$(PREFIX)/lib/libhyla.a
	install -m 755 $(BUILD)/libhyla.so $(DESTDIR)$(PREFIX)/lib/libhyla.so.$(VERSION)
	ln -sf libhyla.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libhyla.so.$(firstword $(subst ., ,$(VERSION)))
	ln -sf libhyla.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libhyla.so
	install -m 644 include/hyla.h $(DESTDIR)$(PREFIX)/include/hyla.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' hyla.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/hyla.pc

$(BUILD)/hyla: $(CLI_OBJ) $(BUILD)/libhyla.a
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libhyla.a $(LDLIBS) -lmicrohttpd $(MPI_LIBS)

$(BUILD)/obj/$(MPI_SRC:.c=.o): CFLAGS += $(MPI_CFLAGS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libhyla.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libhyla.a $(LDLIBS)

# test_train's oracle run, data parallel under mpirun (tests/mpi/mpi_cli_test.sh)
$(BUILD)/mpi/test_train_mpi: tests/test_train.c $(BUILD)/obj/$(MPI_SRC:.c=.o) $(BUILD)/libhyla.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -DHYLA_TEST_MPI -o $@ $< $(BUILD)/obj/$(MPI_SRC:.c=.o) $(BUILD)/libhyla.a $(LDLIBS) $(MPI_LIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libhyla.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I/usr/include/x86_64-linux-gnu/openblas-pthread -o $@ $< $(BUILD)/libhyla.a $(LDLIBS) -lopenblas

$(BUILD)/obj/%.o: %.c Makefile   # flags live in the Makefile: a change to it rebuilds
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
FUZZ_CFLAGS := -std=c11 -g -O1 $(ARCH) -fno-math-errno -fopenmp -D_GNU_SOURCE -Isrc -Iinclude -Wall -Wextra \
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
