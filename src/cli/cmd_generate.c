/* hyla generate DIR (--prompt TEXT | --prompt-tokens IDS): prefill + decode with sampling,
 * streaming text; prefill and decode tokens/s at the end. Text goes through DIR/tokenizer.json
 * (Qwen byte-level BPE) when present, else the byte-level tokenizer hyla train --text uses. */
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/dtype_flags.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/rss.h"
#include "infer/infer_plan.h"
#include "infer/generate.h"
#include "infer/speculative.h"
#include "engine/routing.h"
#include "io/fileio.h"
#include "io/chat.h"
#include "io/gguf_read.h"
#include "io/tokenizer.h"
#include "model/adapter.h"
#include "model/model.h"

typedef struct {
    const hyla_tokenizer *tok; /* NULL: byte-level */
    int json;
} stream_ctx;

static int stream_token(void *vctx, int64_t b, int32_t token)
{
    const stream_ctx *c = vctx;
    if (c->json)
        return 0;
    if (!c->tok) {
        if (token < 256)
            putchar(token);
    } else {
        char *text;
        size_t len;
        if (hyla_tokenizer_decode(c->tok, &token, 1, &text, &len) == HYLA_OK) {
            fwrite(text, 1, len, stdout);
            free(text);
        }
    }
    fflush(stdout);
    (void)b;
    return 0;
}

static int encode_prompt(const hyla_tokenizer *tok, const char *text, int chat, int32_t **ids, int64_t *n)
{
    if (chat) { /* one user message in ChatML (io/chat.h), then the assistant header */
        if (!tok)
            return hyla_error_set(HYLA_ERR_ARG, "--chat needs a tokenizer.json with <|im_start|> / <|im_end|>");
        hyla_chat_message msg = {"user", (char *)text};
        hyla_chat conv = {&msg, 1};
        size_t cnt = 0;
        int rc = hyla_chat_encode(tok, &conv, 1, ids, NULL, &cnt);
        *n = (int64_t)cnt;
        return rc;
    }
    if (tok) {
        size_t cnt;
        int rc = hyla_tokenizer_encode(tok, text, strlen(text), ids, &cnt);
        *n = (int64_t)cnt;
        return rc;
    }
    *n = (int64_t)strlen(text);
    *ids = malloc((size_t)(*n > 0 ? *n : 1) * sizeof **ids);
    if (!*ids)
        return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < *n; i++)
        (*ids)[i] = (unsigned char)text[i];
    return HYLA_OK;
}

/* The run's memory: the inference plan (infer/infer_plan.h) beside the resident bytes measured
 * before the model was loaded and at the peak (VmHWM), so peak - before is what the plan covers. */
static void print_memory(const hyla_model *m, int bf16_weights, int bf16_compute, int64_t prompt, int64_t max_new,
                         size_t rss_before_load)
{
    hyla_infer_plan p;
    if (hyla_infer_plan_make(m, bf16_weights, bf16_compute, 1, prompt, max_new, &p) != HYLA_OK)
        return;
    printf(", \"memory\": {\"planned_weights\": %zu, \"planned_caches\": %zu, \"planned_sampling\": %zu, "
           "\"planned_prefill\": %zu, \"planned_prefill_head\": %zu, \"planned_decode\": %zu, \"planned_peak\": %zu, "
           "\"rss_before_load\": %zu, \"peak_rss\": %zu}",
           p.weights, p.caches, p.sampling, p.prefill, p.prefill_head, p.decode, p.peak, rss_before_load,
           hyla_peak_rss_bytes());
}

int hyla_cmd_generate(int argc, char **argv)
{
    const char *prompt = NULL, *prompt_tokens = NULL, *stop_arg = NULL, *tok_path = NULL, *record = NULL, *adapter = NULL;
    int json = 0, chat = 0;
    int64_t max_new = 64, top_k = 0, seed = 1, threads = 0, repeat_stop = 0, draft = 0;
    double temperature = 0.0, top_p = 1.0;
    hyla_cli_dtypes dt = {0};
    const hyla_opt opts[] = {
        {"--prompt", OPT_STRING, &prompt, "TEXT", "prompt text", 0, 0},
        {"--prompt-tokens", OPT_STRING, &prompt_tokens, "IDS", "prompt as comma-separated token ids", 0, 0},
        {"--max-new", OPT_INT, &max_new, "N", "tokens to generate (default 64)", 1, 1 << 24},
        {"--temperature", OPT_DOUBLE, &temperature, "X", "0 = greedy (default), else softmax temperature", 0, 0},
        {"--top-k", OPT_INT, &top_k, "N", "sample among the N most likely tokens (0 = all)", 0, INT64_MAX},
        {"--top-p", OPT_DOUBLE, &top_p, "X", "nucleus sampling mass in (0, 1] (default 1)", 0, 0},
        {"--seed", OPT_INT, &seed, "N", "sampling seed (default 1)", 0, INT64_MAX},
        {"--stop", OPT_STRING, &stop_arg, "IDS", "stop at any of these token ids", 0, 0},
        {"--repeat-stop", OPT_INT, &repeat_stop, "N", "stop when the last N tokens repeat the N before (0 = off)", 0, 1 << 20},
        {"--chat", OPT_FLAG, &chat, NULL, "wrap the prompt in the Qwen chat template; stop at <|im_end|>", 0, 0},
        {"--tokenizer", OPT_STRING, &tok_path, "FILE", "tokenizer.json or a .gguf file's vocabulary (default: "
         "DIR/tokenizer.json if present)", 0, 0},
        {"--adapter", OPT_STRING, &adapter, "DIR", "a LoRA adapter (PEFT format), merged into the weights at load", 0, 0},
        {"--json", OPT_FLAG, &json, NULL, "print prompt and generated ids as JSON instead of text", 0, 0},
        {"--record-routing", OPT_STRING, &record, "FILE", "write the experts chosen per MoE layer and token (HYLAROU1)", 0, 0},
        {"--threads", OPT_INT, &threads, "N", "OpenMP threads (default: all cores)", 0, 4096},
        {"--draft", OPT_INT, &draft, "N", "speculative decoding: draft N tokens per round with the MTP head (greedy or sampled: the same output distribution)",
         0, HYLA_MAX_DRAFT},
        HYLA_OPT_ACT_DTYPE(dt),
        HYLA_OPT_PARAM_DTYPE(dt),
        {0},
    };
    const hyla_command_spec spec = {"generate", "DIR (--prompt TEXT | --prompt-tokens IDS) [options]",
                                    "Generate a continuation with the model in DIR.", opts, 1, 1, NULL};
    const char *pos[1];
    int npos, r = hyla_opts_parse(&spec, argc, argv, pos, &npos);
    if (r)
        return r < 0 ? 2 : 0;
    if (draft && record) {
        fprintf(stderr, "hyla generate: --draft and --record-routing cannot be combined\n");
        return 2;
    }
    if (!prompt == !prompt_tokens) {
        fprintf(stderr, "hyla generate: give exactly one of --prompt or --prompt-tokens\n");
        return 2;
    }
    int bf16_compute, bf16_weights;
    if (hyla_cli_precision(&dt, 0, &bf16_compute, &bf16_weights)) {
        hyla_cli_fail("generate");
        return 2;
    }
    hyla_cli_set_threads(threads);
    char default_tok[4200];
    snprintf(default_tok, sizeof default_tok, "%s/tokenizer.json", pos[0]);
    int gguf = hyla_is_gguf_path(pos[0]);
    if (!tok_path && !gguf && hyla_file_exists(default_tok))
        tok_path = default_tok;
    if (!tok_path && !gguf && prompt) /* never silently: a Hugging Face directory may hold vocab.json + merges.txt only */
        fprintf(stderr, "hyla generate: no tokenizer.json in %s (and no --tokenizer): prompt and output are raw bytes\n",
                pos[0]);
    hyla_tokenizer *tok = NULL;
    hyla_model m;
    memset(&m, 0, sizeof m);
    int32_t *ids = NULL, *stop = NULL, *out = NULL;
    int64_t n_ids = 0, n_stop = 0, n_out = 0;
    int rc = 0;
    if (stop_arg && hyla_parse_int_list("--stop", stop_arg, &stop, &n_stop))
        return 2;
    if (prompt_tokens && hyla_parse_int_list("--prompt-tokens", prompt_tokens, &ids, &n_ids)) {
        free(stop);
        return 2;
    }
    hyla_adapter_info ai;
    size_t rss_before_load = 0;
    if (!tok_path && gguf && (prompt || chat)) /* the file's own vocabulary (hyla_tokenizer_load reads a .gguf) */
        tok_path = pos[0];
    if (tok_path && hyla_tokenizer_load(&tok, tok_path) != HYLA_OK) {
        rc = hyla_cli_fail("generate");
        goto done;
    }
    rss_before_load = hyla_rss_bytes(); /* what the inference plan does not cover: the process and its tokenizer */
    if (hyla_model_load_inference(&m, pos[0], adapter, &ai, bf16_compute, bf16_weights) ||
        (prompt && encode_prompt(tok, prompt, chat, &ids, &n_ids))) {
        rc = hyla_cli_fail("generate");
        goto done;
    }
    if (chat) { /* stop at <|im_end|> */
        int32_t end = hyla_tokenizer_token_id(tok, "<|im_end|>");
        int32_t *ns = realloc(stop, (size_t)(n_stop + 1) * sizeof *ns);
        if (end >= 0 && ns)
            stop = ns, stop[n_stop++] = end;
    }
    hyla_sampling s = {temperature, top_k, top_p, (uint64_t)seed, max_new, stop, (int)n_stop, repeat_stop};
    out = malloc((size_t)max_new * sizeof *out);
    stream_ctx sc = {tok, json};
    hyla_generate_stats st;
    const int32_t *prompts[1] = {ids};
    if (!json && prompt)
        printf("%s", chat ? "" : prompt);
    hyla_routing routing = {0, 0, 0, NULL};
    int failed = !out || (record  ? hyla_generate_recorded(&m, ids, n_ids, &s, out, &n_out, stream_token, &sc, &st, &routing)
                          : draft ? hyla_generate_draft(&m, ids, n_ids, &s, (int)draft, out, &n_out, stream_token, &sc, &st)
                                  : hyla_generate(&m, 1, prompts, &n_ids, &s, &out, &n_out, stream_token, &sc, &st));
    if (!failed && record)
        failed = hyla_routing_write(record, &routing) != HYLA_OK;
    hyla_routing_free(&routing);
    if (failed) {
        rc = hyla_cli_fail("generate");
        goto done;
    }
    double pf = st.prefill_tokens / (st.prefill_seconds > 0 ? st.prefill_seconds : 1e-9);
    double dc = st.decode_tokens / (st.decode_seconds > 0 ? st.decode_seconds : 1e-9);
    if (json) {
        printf("{\"prompt_tokens\": [");
        for (int64_t i = 0; i < n_ids; i++)
            printf("%s%d", i ? ", " : "", ids[i]);
        printf("], \"tokens\": [");
        for (int64_t i = 0; i < n_out; i++)
            printf("%s%d", i ? ", " : "", out[i]);
        printf("], \"prefill_tokens_per_s\": %.1f, \"decode_tokens_per_s\": %.1f", pf, dc);
        if (draft)
            printf(", \"draft\": {\"n\": %lld, \"rounds\": %lld, \"drafted\": %lld, \"accepted\": %lld, "
                   "\"acceptance\": %.4f, \"mean_accepted_length\": %.3f}",
                   (long long)draft, (long long)st.draft_rounds, (long long)st.drafted, (long long)st.accepted,
                   st.drafted ? (double)st.accepted / (double)st.drafted : 0.0,
                   st.draft_rounds ? (double)st.accepted / (double)st.draft_rounds : 0.0);
        print_memory(&m, bf16_weights, bf16_compute, n_ids, max_new, rss_before_load);
        printf("}\n");
    } else {
        printf("\n");
        fflush(stdout);
        fprintf(stderr, "prefill %lld tokens at %.1f tokens/s; decode %lld tokens at %.1f tokens/s\n",
                (long long)st.prefill_tokens, pf, (long long)st.decode_tokens, dc);
        if (draft)
            fprintf(stderr, "draft %lld: %lld rounds, %lld of %lld drafts accepted (%.1f%%), %.2f accepted per round\n",
                    (long long)draft, (long long)st.draft_rounds, (long long)st.accepted, (long long)st.drafted,
                    st.drafted ? 100.0 * (double)st.accepted / (double)st.drafted : 0.0,
                    st.draft_rounds ? (double)st.accepted / (double)st.draft_rounds : 0.0);
    }
done:
    free(out);
    free(ids);
    free(stop);
    if (tok)
        hyla_tokenizer_free(tok);
    if (m.w)
        hyla_model_free(&m);
    return rc;
}
