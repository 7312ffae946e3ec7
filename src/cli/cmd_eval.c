/* hyla eval DIR (--data F | --text F | --data-jsonl F): mean loss, perplexity, tokens scored. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/dtype_flags.h"
#include "cli/options.h"
#include "core/error.h"
#include "io/tokenizer.h"
#include "model/adapter.h"
#include "train/eval.h"

int hyla_cmd_eval(int argc, char **argv)
{
    const char *data = NULL, *text = NULL, *jsonl = NULL, *tok_path = NULL, *adapter = NULL;
    int64_t seq = 512, batch = 4, threads = 0;
    int json = 0, pack = 0, no_pack = 0;
    hyla_cli_dtypes dt = {0};
    const hyla_opt opts[] = {
        {"--data", OPT_STRING, &data, "FILE", "token file (HYLATOK1 stream or HYLATOK2 documents)", 0, 0},
        {"--text", OPT_STRING, &text, "FILE", "text file, byte-level tokens", 0, 0},
        {"--data-jsonl", OPT_STRING, &jsonl, "FILE", "JSONL documents ({\"text\"} or {\"messages\"}: assistant tokens "
         "scored)", 0, 0},
        {"--tokenizer", OPT_STRING, &tok_path, "FILE", "tokenizer.json (or a .gguf file's vocabulary) for --data-jsonl "
         "(default: DIR's)", 0, 0},
        {"--seq", OPT_INT, &seq, "N", "tokens per row (default 512; longer documents take several rows)", 2, 1 << 24},
        {"--batch", OPT_INT, &batch, "N", "rows per forward pass (default 4)", 1, 1 << 20},
        {"--no-pack", OPT_FLAG, &no_pack, NULL, "each document in rows of its own (the default)", 0, 0},
        {"--pack", OPT_FLAG, &pack, NULL, "documents share rows, each computed as if alone (the same loss); a "
         "document longer than --seq is split into rows as without packing", 0, 0},
        {"--adapter", OPT_STRING, &adapter, "DIR", "a LoRA adapter (PEFT format), merged into the weights at load", 0, 0},
        {"--json", OPT_FLAG, &json, NULL, "print the result as JSON", 0, 0},
        {"--threads", OPT_INT, &threads, "N", "OpenMP threads (default: all cores)", 0, 4096},
        HYLA_OPT_ACT_DTYPE(dt),
        HYLA_OPT_PARAM_DTYPE(dt),
        {0},
    };
    const hyla_command_spec spec = {"eval", "DIR (--data F | --text F | --data-jsonl F) [options]",
                                    "Mean next-token loss and perplexity of the model in DIR over a data file.", opts, 1, 1, NULL};
    const char *pos[1];
    int npos, r = hyla_opts_parse(&spec, argc, argv, pos, &npos);
    if (r)
        return r < 0 ? 2 : 0;
    const char *bad = !!data + !!text + !!jsonl != 1 ? "give exactly one of --data, --text, --data-jsonl"
                      : pack && no_pack ? "--pack and --no-pack contradict each other"
                      : tok_path && !jsonl ? "--tokenizer applies to --data-jsonl" : NULL;
    if (bad) {
        fprintf(stderr, "hyla eval: %s\n", bad);
        return 2;
    }
    int bf16_compute, bf16_weights;
    if (hyla_cli_precision(&dt, 0, &bf16_compute, &bf16_weights)) {
        hyla_cli_fail("eval");
        return 2;
    }
    hyla_cli_set_threads(threads);
    hyla_model m;
    hyla_adapter_info ai;
    if (hyla_model_load_inference(&m, pos[0], adapter, &ai, bf16_compute, bf16_weights))
        return hyla_cli_fail("eval");
    hyla_data d;
    memset(&d, 0, sizeof d);
    int st;
    if (jsonl) {
        hyla_tokenizer *tok = NULL;
        st = hyla_cli_open_tokenizer(tok_path, pos[0], &tok);
        if (st == HYLA_OK)
            st = hyla_data_open_jsonl(&d, jsonl, tok, m.cfg.vocab);
        hyla_tokenizer_free(tok);
    } else {
        st = data ? hyla_data_open_tokens(&d, data, m.cfg.vocab) : hyla_data_open_text(&d, text, m.cfg.vocab);
    }
    hyla_eval_result e;
    if (st == HYLA_OK)
        st = hyla_evaluate(&m, &d, seq, batch, pack, NULL, &e);
    int rc = 0;
    if (st != HYLA_OK)
        rc = hyla_cli_fail("eval");
    else if (json)
        printf("{\"loss\": %.9g, \"perplexity\": %.9g, \"tokens\": %lld, \"rows\": %lld, \"seconds\": %.3f, "
               "\"tokens_per_s\": %.1f, \"data\": \"%s\"}\n", e.loss, e.perplexity, (long long)e.targets,
               (long long)e.rows, e.seconds, e.targets / (e.seconds > 0 ? e.seconds : 1e-9), d.source);
    else
        printf("%s: loss %.4f, perplexity %.3f over %lld tokens (%lld rows of %lld) in %.2f s (%.0f tokens/s)\n",
               d.source, e.loss, e.perplexity, (long long)e.targets, (long long)e.rows, (long long)seq, e.seconds,
               e.targets / (e.seconds > 0 ? e.seconds : 1e-9));
    hyla_data_close(&d);
    hyla_model_free(&m);
    return rc;
}
