/* hyla: command-line entry point. */
#include <errno.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "io/fileio.h"
#include "io/tokenizer.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/quant.h"
#include "hyla.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"inspect", hyla_cmd_inspect, "config summary, block schedule, parameter counts, tensor table"},
    {"forward", hyla_cmd_forward, "run a forward pass: logits and loss for a token sequence"},
    {"init", hyla_cmd_init, "write a randomly initialised model (spec init) as a Hugging Face directory"},
    {"train", hyla_cmd_train, "train from scratch or a checkpoint: nested block executor, remat policies, AdamW"},
    {"generate", hyla_cmd_generate, "prefill + decode with per-layer caches; greedy / temperature / top-k / top-p"},
    {"eval", hyla_cmd_eval, "mean loss and perplexity over a token, text or JSONL file (documents scored on their own)"},
    {"merge", hyla_cmd_merge, "merge a LoRA adapter (PEFT format) into a model and save it"},
    {"serve", hyla_cmd_serve, "OpenAI-compatible HTTP server with continuous batching (completions, chat, streaming)"},
    {"plan", hyla_cmd_plan, "predict a training step's memory from a config alone (argument / temp bytes, per checkpoint)"},
    {"tokenize", hyla_cmd_tokenize, "encode / decode with a Qwen tokenizer.json; write training token files"},
    {"convert", hyla_cmd_convert, "re-save a model in another layout, sharding or dtype, or export it as GGUF for llama.cpp"},
};

int hyla_cli_open_tokenizer(const char *path, const char *dir, hyla_tokenizer **tok)
{
    char buf[4200];
    size_t n = dir ? strlen(dir) : 0;
    if (!path && n > 5 && !strcmp(dir + n - 5, ".gguf")) /* a GGUF model: its tokenizer.ggml.* (hyla_tokenizer_load) */
        path = dir;
    if (!path) {
        if (!dir || hyla_path_join(buf, sizeof buf, dir, "tokenizer.json") != HYLA_OK || !hyla_file_exists(buf))
            return hyla_error_set(HYLA_ERR_ARG, "--data-jsonl needs a tokenizer: give --tokenizer FILE, or a model "
                                  "directory with tokenizer.json (%s)", dir ? "it has none" : "this model has no directory");
        path = buf;
    }
    return hyla_tokenizer_load(tok, path);
}

int hyla_cli_fail(const char *cmd)
{
    fprintf(stderr, "hyla %s: error: %s\n", cmd, hyla_error_message());
    return 1;
}

void hyla_cli_set_threads(int64_t threads)
{
    if (threads > 0)
        omp_set_num_threads((int)threads);
}

static void usage(FILE *f)
{
    fprintf(f, "hyla — training and inference engine for hybrid linear/full-attention MoE models\n\n"
               "usage: hyla COMMAND [options]   (hyla COMMAND --help for its options; hyla --version)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nGEMM backend: %s\n", hyla_gemm_backend_name());
}

/* OpenMP reads its wait policy once, from the environment, before main runs. libgomp's default
 * (spin up to 300k iterations at every barrier before sleeping) collapses when another process
 * holds a core: a region's threads spin while the one they wait for is descheduled (a tiny
 * model's decode: 142 tokens/s with 2 threads against 1,444 with 1). A passive policy (never
 * spin) survives load but halves quiet-machine speed (every barrier becomes a futex wake). A
 * bounded spin of ~30k iterations (tens of microseconds) keeps the quiet speed and avoids the
 * collapse (bench/threads_under_load.sh has the figures). Unless the user chose a policy, hyla
 * runs itself again once with it. */
#define HYLA_DEFAULT_SPINCOUNT "30000"

static void default_wait_policy(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT"))
        return;
    if (setenv("GOMP_SPINCOUNT", HYLA_DEFAULT_SPINCOUNT, 1) == 0)
        execv("/proc/self/exe", argv); /* returns only on failure: go on with OpenMP's default */
}

int main(int argc, char **argv)
{
    default_wait_policy(argv);
    /* HYLA_INT8_ACTIVATIONS=0: a GGUF model's K-quant and Q8_0 decode products keep fp32 activations
     * (the default rounds them to int8, per 256 / per 32, for VNNI: core/quant.h) */
    const char *int8 = getenv("HYLA_INT8_ACTIVATIONS");
    if (int8 && !strcmp(int8, "0"))
        hyla_quant_int8_activations = 0;
    const char *products = getenv("HYLA_BF16_PRODUCTS"); /* how bf16 compute multiplies (core/gemm.h) */
    if (hyla_bf16w_parse_kind(products) == -2) {
        fprintf(stderr, "hyla: HYLA_BF16_PRODUCTS=%s: must be native, widened or auto\n", products);
        return 2;
    }
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("hyla %s (GEMM backend: %s)\n", hyla_version(), hyla_gemm_backend_name());
        return 0;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            int rc = commands[i].run(argc - 1, argv + 1);
            /* what went to standard output (a pipe, a file on a full disk) must have arrived */
            if (fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "hyla %s: error: standard output: write failed: %s\n", argv[1], strerror(errno));
                return rc ? rc : 1;
            }
            return rc;
        }
    fprintf(stderr, "hyla: unknown command '%s' (see hyla --help)\n", argv[1]);
    return 2;
}
