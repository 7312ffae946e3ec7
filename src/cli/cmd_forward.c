/* hyla forward DIR --tokens 1,2,3 [--logits-out FILE] [--json]: logits and next-token loss;
 * --mtp-logits-out / --hidden-out: the MTP head's logits and the trunk's hidden rows it reads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/dtype_flags.h"
#include "cli/options.h"
#include "core/error.h"
#include "io/fileio.h"
#include "engine/forward.h"
#include "infer/mtp.h"
#include "model/adapter.h"

static void print_number(const char *key, double v, int last)
{
    if (isnan(v))
        printf("  \"%s\": null%s\n", key, last ? "" : ",");
    else
        printf("  \"%s\": %.9g%s\n", key, v, last ? "" : ",");
}

/* --logits-out: each chunk of the head's logits goes to the file as it is made, so no
 * [T, vocab] buffer exists (the working set is the head's chunk x vocab, hyla_head_rows). */
typedef struct {
    hyla_atomic_file file;
    int64_t vocab;
} logits_file;

static int write_logits(void *ctx, int64_t row0, int64_t rows, const float *logits)
{
    (void)row0; /* chunks arrive in row order */
    logits_file *f = ctx;
    return hyla_atomic_write(&f->file, logits, (size_t)rows * (size_t)f->vocab * sizeof *logits);
}

/* --mtp-logits-out FILE [--hidden-out FILE]: the head's logits [T - 1, V] streamed, then the
 * trunk's final-normed hidden rows [T, H]. */
static int write_mtp(const hyla_model *m, const int32_t *tokens, int64_t T, const char *logits_path,
                     const char *hidden_path)
{
    logits_file f = {.vocab = m->cfg.vocab};
    float *hidden = hidden_path ? malloc((size_t)(T * m->cfg.hidden) * sizeof *hidden) : NULL;
    if (hidden_path && !hidden)
        return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    int rc = hyla_atomic_open(&f.file, logits_path);
    if (rc == HYLA_OK) {
        rc = hyla_mtp_sequence_logits(m, tokens, T, hidden, write_logits, &f);
        rc = rc == HYLA_OK ? hyla_atomic_commit(&f.file) : (hyla_atomic_abort(&f.file), rc);
    }
    if (rc == HYLA_OK && hidden_path)
        rc = hyla_write_file_atomic(hidden_path, hidden, (size_t)(T * m->cfg.hidden) * sizeof *hidden);
    free(hidden);
    return rc;
}

int hyla_cmd_forward(int argc, char **argv)
{
    const char *tokens_arg = NULL, *logits_out = NULL, *adapter = NULL, *mtp_out = NULL, *hidden_out = NULL;
    int json = 0, recurrent = 0;
    int64_t threads = 0;
    hyla_cli_dtypes dt = {0};
    const hyla_opt opts[] = {
        {"--tokens", OPT_STRING, &tokens_arg, "IDS", "comma-separated token ids (required)", 0, 0},
        {"--logits-out", OPT_STRING, &logits_out, "FILE", "write logits as little-endian float32 [T, vocab]", 0, 0},
        {"--mtp-logits-out", OPT_STRING, &mtp_out, "FILE",
         "write the MTP head's logits as float32 [T - 1, vocab]: row t from (token t + 1, hidden t), for token t + 2", 0, 0},
        {"--hidden-out", OPT_STRING, &hidden_out, "FILE", "with --mtp-logits-out: the trunk's final-normed hidden rows, float32 [T, hidden]", 0, 0},
        {"--json", OPT_FLAG, &json, NULL, "print the result as JSON", 0, 0},
        {"--adapter", OPT_STRING, &adapter, "DIR", "a LoRA adapter (PEFT format), merged into the weights at load", 0, 0},
        {"--recurrent", OPT_FLAG, &recurrent, NULL, "use the recurrent delta rule instead of the chunked one", 0, 0},
        {"--threads", OPT_INT, &threads, "N", "OpenMP threads (default: all cores)", 0, 4096},
        HYLA_OPT_ACT_DTYPE(dt),
        HYLA_OPT_PARAM_DTYPE(dt),
        {0},
    };
    const hyla_command_spec spec = {"forward", "DIR --tokens IDS [options]",
                                    "Run the model in DIR over one token sequence; print the next-token loss.", opts, 1, 1, NULL};
    const char *pos[1];
    int npos, r = hyla_opts_parse(&spec, argc, argv, pos, &npos);
    if (r)
        return r < 0 ? 2 : 0;
    if (!tokens_arg) {
        fprintf(stderr, "hyla forward: --tokens is required\n");
        return 2;
    }
    int bf16_compute, bf16_weights;
    if (hyla_cli_precision(&dt, 0, &bf16_compute, &bf16_weights)) {
        hyla_cli_fail("forward");
        return 2;
    }
    hyla_cli_set_threads(threads);
    int32_t *tokens;
    int64_t T;
    if (hidden_out && !mtp_out) {
        fprintf(stderr, "hyla forward: --hidden-out goes with --mtp-logits-out\n");
        return 2;
    }
    if (hyla_parse_int_list("--tokens", tokens_arg, &tokens, &T))
        return 2;
    hyla_model m;
    hyla_adapter_info ai;
    if (hyla_model_load_inference(&m, pos[0], adapter, &ai, bf16_compute, bf16_weights)) {
        free(tokens);
        return hyla_cli_fail("forward");
    }
    int rc = 0;
    hyla_forward_out out;
    logits_file file = {.vocab = m.cfg.vocab};
    int opened = logits_out && hyla_atomic_open(&file.file, logits_out) == HYLA_OK;
    hyla_delta_mode mode = recurrent ? HYLA_DELTA_RECURRENT : HYLA_DELTA_CHUNKED;
    if (logits_out && !opened) {
        rc = hyla_cli_fail("forward");
    } else if (opened ? hyla_forward_streamed(&m, tokens, NULL, 1, T, mode, write_logits, &file, &out)
                      : hyla_forward(&m, tokens, NULL, 1, T, mode, NULL, &out)) {
        if (opened)
            hyla_atomic_abort(&file.file);
        rc = hyla_cli_fail("forward");
    } else if (opened && hyla_atomic_commit(&file.file)) {
        rc = hyla_cli_fail("forward");
    } else if (mtp_out && write_mtp(&m, tokens, T, mtp_out, hidden_out)) {
        rc = hyla_cli_fail("forward");
    } else if (json) {
        printf("{\n  \"tokens\": %lld,\n  \"vocab\": %lld,\n  \"loss_positions\": %lld,\n", (long long)T,
               (long long)m.cfg.vocab, (long long)out.ce_count);
        print_number("loss", out.ce_loss, 0);
        print_number("aux_loss", out.aux_loss, 0);
        print_number("total_loss", out.total_loss, 1);
        printf("}\n");
    } else {
        printf("tokens %lld  loss %.6f over %lld positions", (long long)T, out.ce_loss, (long long)out.ce_count);
        if (!isnan(out.aux_loss))
            printf("  aux_loss %.6f  total %.6f", out.aux_loss, out.total_loss);
        printf("\n");
    }
    free(tokens);
    hyla_model_free(&m);
    return rc;
}
