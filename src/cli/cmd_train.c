/* hyla train: train from scratch (--preset / --config) or from a Hugging Face directory
 * (--model), on a token file, a text file (byte-level tokens) or synthetic data. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/rss.h"
#include "parallel/agree.h"
#include "parallel/comm_mpi.h"
#include "io/fileio.h"
#include "io/outdir.h"
#include "io/tokenizer.h"
#include "engine/forward.h"
#include "model/presets.h"
#include "engine/routing.h"
#include "engine/auto_policy.h"
#include "model/pieces.h"
#include "train/checkpoint.h"
#include "train/checkpoint_pieces.h"
#include "train/data.h"
#include "train/eval.h"
#include "engine/plan_svg.h"
#include "train/trainer.h"

#include "cli/train_args.h"

static int open_model(const train_args *a, hyla_model *m)
{
    if (a->resume && !a->adapter_resume && hyla_pieces_is_dir(a->resume)) /* its tensors at resume_state */
        return hyla_model_load_pieces(m, a->resume, 0);
    if (a->resume && !a->adapter_resume && a->fsdp) /* FSDP: each rank reads its pieces after setup */
        return hyla_model_load_deferred(m, a->resume);
    if (a->resume && !a->adapter_resume)
        return hyla_checkpoint_load_model(a->resume, m);
    if (a->model && a->fsdp && !a->bf16_weights) /* FSDP: each rank reads its pieces after setup */
        return hyla_model_load_deferred(m, a->model);
    if (a->model) /* --param-dtype bf16 (LoRA): the matrices straight into bf16, never an fp32 copy */
        return a->bf16_weights ? hyla_model_load_bf16(m, a->model) : hyla_model_load(m, a->model);
    char *text = NULL;
    const char *origin = a->config;
    if (a->preset) {
        const char *j = hyla_preset_json(a->preset);
        if (!j)
            return hyla_error_set(HYLA_ERR_ARG, "unknown preset '%s' (known: %s)", a->preset, hyla_preset_names());
        text = strdup(j);
        origin = a->preset;
    } else {
        HYLA_TRY(hyla_read_text_file(a->config, &text, NULL));
    }
    hyla_config cfg;
    int rc = hyla_config_parse(&cfg, text, origin);
    if (rc == HYLA_OK) {
        hyla_layout lay;
        hyla_default_layout(&cfg, &lay);
        rc = hyla_model_init(m, &cfg, &lay, (uint64_t)a->seed, HYLA_DT_F32);
        if (rc == HYLA_OK) {
            m->config_json = text;
            text = NULL;
        }
    }
    free(text);
    return rc;
}

static int open_tokenizer(const train_args *a, hyla_tokenizer **tok)
{
    return hyla_cli_open_tokenizer(a->tokenizer, a->resume && !a->adapter_resume ? a->resume : a->model, tok);
}

static int open_data(const train_args *a, const hyla_model *m, hyla_data *d)
{
    if (a->jsonl) {
        hyla_tokenizer *tok;
        HYLA_TRY(open_tokenizer(a, &tok));
        int st = hyla_data_open_jsonl(d, a->jsonl, tok, m->cfg.vocab);
        hyla_tokenizer_free(tok);
        d->shuffle = !a->no_shuffle;
        d->seed = (uint64_t)a->seed;
        d->pack = a->pack;
        return st;
    }
    if (a->data) {
        HYLA_TRY(hyla_data_open_tokens(d, a->data, m->cfg.vocab));
        d->shuffle = a->shuffle && hyla_data_labelled(d);
        d->seed = (uint64_t)a->seed;
        if (a->pack && !hyla_data_labelled(d))
            return hyla_error_set(HYLA_ERR_ARG, "--pack: %s is a token stream (HYLATOK1), not documents: packing needs "
                                  "documents (--data-jsonl, or a HYLATOK2 file from hyla tokenize --jsonl)", a->data);
        d->pack = a->pack;
        return HYLA_OK;
    }
    if (a->text)
        return hyla_data_open_text(d, a->text, m->cfg.vocab);
    hyla_data_open_synthetic(d, (uint64_t)a->seed, m->cfg.vocab);
    return HYLA_OK;
}

/* --eval-data: a token file, or (.jsonl) JSONL documents through the training tokenizer. */
static int open_eval_data(const train_args *a, const hyla_model *m, hyla_data *d)
{
    size_t n = strlen(a->eval_data);
    if (n < 6 || strcmp(a->eval_data + n - 6, ".jsonl"))
        return hyla_data_open_tokens(d, a->eval_data, m->cfg.vocab);
    hyla_tokenizer *tok;
    HYLA_TRY(open_tokenizer(a, &tok));
    int st = hyla_data_open_jsonl(d, a->eval_data, tok, m->cfg.vocab);
    hyla_tokenizer_free(tok);
    return st;
}

/* Every rank alike: the batches split over the ranks, FSDP's weights gathered layer by layer
 * (hyla_fsdp_outside_step); rank 0 prints and logs. */
static int run_eval(const train_args *a, hyla_comm *comm, hyla_trainer *tr, const hyla_model *m, const hyla_data *d,
                    int64_t step, FILE *log)
{
    hyla_eval_result e;
    hyla_eval_ranks ranks = {comm, tr->sharded ? &tr->fsdp.source : NULL};
    int rc = tr->sharded ? hyla_fsdp_outside_step(&tr->fsdp, 1) : HYLA_OK;
    if (rc == HYLA_OK)
        rc = hyla_evaluate(m, d, a->seq, a->batch, a->pack, &ranks, &e);
    if (tr->sharded)
        hyla_fsdp_outside_step(&tr->fsdp, 0);
    if (rc != HYLA_OK || comm->rank != 0)
        return rc;
    printf("eval  step %lld: loss %.4f, perplexity %.3f over %lld tokens of %s\n", (long long)step, e.loss, e.perplexity,
           (long long)e.targets, d->source);
    if (log) {
        fprintf(log, "{\"step\": %lld, \"eval_loss\": %.9g, \"eval_perplexity\": %.9g, \"eval_tokens\": %lld}\n",
                (long long)step, e.loss, e.perplexity, (long long)e.targets);
        if (fflush(log) != 0 || ferror(log))
            return hyla_error_set(HYLA_ERR_IO, "%s: write failed at step %lld", a->log_json, (long long)step);
    }
    return HYLA_OK;
}

static void print_memory(const hyla_trainer *tr, const hyla_model *m)
{
    double mib = 1024.0 * 1024.0, params = (double)hyla_trainer_weight_bytes(tr); /* FSDP: this rank's pieces */
    double trained = 4.0 * (double)tr->opt.n_floats; /* the moments cover what is trained (LoRA: the adapter) */
    if (m->lora)
        params += trained;
    size_t staging = tr->ex.xfer_bytes[0] + tr->ex.xfer_bytes[1];
    printf("memory: parameters %.1f MiB%s, gradients %.1f MiB, AdamW moments %.1f MiB; activations (policy %s, unit %s): "
           "checkpoints %.2f MiB + working set %.2f MiB + carries %.2f MiB",
           params / mib, m->lora ? " (frozen base + adapter)" : tr->sharded ? " (this rank's pieces; + gathered layers)" : "",
           hyla_trainer_gradient_bytes(tr) / mib, 2 * trained / mib,
           tr->cfg.policy.name, hyla_remat_unit_name(tr->cfg.unit),
           tr->ex.ckpt_bytes / mib, tr->ex.work_bytes / mib,
           (hyla_trainer_activation_bytes(tr) - tr->ex.ckpt_bytes - tr->ex.work_bytes - staging) / mib);
    if (tr->store)
        printf(" + offload staging %.2f MiB", staging / mib);
    printf(" = %.2f MiB\n", hyla_trainer_activation_bytes(tr) / mib);
    if (tr->store)
        printf("offload: %.2f MiB of checkpoints per step to the host store %s\n", tr->ex.host_bytes / mib,
               hyla_host_store_path(tr->store));
}

/* Greedy continuation of a byte-level prompt by re-running the forward over the growing prefix. */
/* Greedy bytes from the prompt; weights: FSDP's gathered layers (every rank runs it, rank 0
 * prints), or NULL. */
static int sample_greedy(const hyla_model *m, const hyla_weight_source *weights, int print, const char *prompt,
                         int64_t n_new)
{
    int64_t len = (int64_t)strlen(prompt), cap = len + n_new, V = m->cfg.vocab;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    float *logits = malloc((size_t)V * sizeof *logits); /* [V]: the last position's */
    if (!ids || !logits) {
        free(ids);
        free(logits);
        return hyla_error_set(HYLA_ERR_NOMEM, "sample: out of memory");
    }
    for (int64_t i = 0; i < len; i++)
        ids[i] = (unsigned char)prompt[i];
    if (print)
        printf("sample> %s", prompt);
    for (int64_t t = len; t < cap; t++) {
        hyla_forward_out out;
        int rc = hyla_forward_last_row_from(m, weights, ids, t, logits, &out);
        if (rc) {
            free(ids);
            free(logits);
            return rc;
        }
        const float *last = logits;
        int32_t best = 0;
        for (int32_t v = 1; v < 256 && v < V; v++) /* byte-level: only byte tokens are printable */
            if (last[v] > last[best])
                best = v;
        ids[t] = best;
        if (print) {
            putchar(best);
            fflush(stdout);
        }
    }
    if (print)
        printf("\n");
    free(ids);
    free(logits);
    return HYLA_OK;
}

/* One record per step, flushed; a failed write (a full disk) is an error that stops the run. */
static int log_json(FILE *f, const char *path, int64_t step, const hyla_step_stats *s, size_t act_bytes,
                    const hyla_trainer *tr)
{
    fprintf(f, "{\"step\": %lld, \"loss\": %.9g, \"ce\": %.9g, ", (long long)step, s->loss, s->ce);
    if (isnan(s->aux))
        fprintf(f, "\"aux\": null, ");
    else
        fprintf(f, "\"aux\": %.9g, ", s->aux);
    if (!isnan(s->mtp))
        fprintf(f, "\"mtp\": %.9g, ", s->mtp);
    fprintf(f, "\"lr\": %.9g, \"grad_norm\": %.9g, \"tokens\": %lld, \"seconds\": %.6f, \"tokens_per_s\": %.1f, "
               "\"activation_bytes\": %zu, \"gradient_bytes\": %zu, \"weight_bytes\": %zu, \"optimizer_bytes\": %zu, "
               "\"offload_bytes\": %llu, \"copy_seconds\": %.6f, \"copy_wait_seconds\": %.6f, "
               "\"copy_hidden_fraction\": %.4f, \"comm_bytes\": %llu, \"comm_seconds\": %.6f, "
               "\"gather_wait_seconds\": %.6f, \"reduce_seconds\": %.6f, \"reduce_wait_seconds\": %.6f, "
               "\"context_seconds\": %.6f, \"context_chain_seconds\": %.6f, \"context_chain_wait_seconds\": %.6f, "
               "\"context_chain_run_seconds\": [%.6f, %.6f], \"peak_rss_bytes\": %zu}\n",
            s->lr, s->grad_norm, (long long)s->tokens, s->seconds, s->tokens / s->seconds, act_bytes, hyla_trainer_gradient_bytes(tr),
            hyla_trainer_weight_bytes(tr), 2 * tr->opt.n_floats * sizeof(float),
            (unsigned long long)s->offload_bytes, s->copy_seconds, s->copy_wait_seconds, train_hidden_fraction(s),
            (unsigned long long)s->comm_bytes, s->comm_seconds, s->gather_wait_seconds, s->reduce_seconds,
            s->reduce_wait_seconds, s->context_seconds, s->context_chain_seconds, s->context_chain_wait_seconds,
            s->context_chain_run_seconds[0], s->context_chain_run_seconds[1], hyla_peak_rss_bytes());
    if (fflush(f) != 0 || ferror(f))
        return hyla_error_set(HYLA_ERR_IO, "%s: write failed at step %lld: %s", path, (long long)step, strerror(errno));
    return HYLA_OK;
}

/* Context parallelism: a step's `wholes` micro-batches of B whole rows of T tokens (labels: given,
 * or each row's next tokens) -> the trainer's micro-batch g (run by rank g % N) = slice g % cp of
 * whole micro-batch (g / N) (N / cp) + (g % N) / cp: B rows of T / cp tokens and their labels (a
 * slice's last label is the next slice's first token), and next[2 (g B + b) + {0, 1}]: the token
 * after the row's slice and its target (the MTP head's; token -1 after the last slice). */
static void cut_slices(int32_t *st, int32_t *sl, int32_t *next, const int32_t *tokens, const int32_t *labels,
                       int64_t wholes, int64_t B, int64_t T, int cp, int N)
{
    int64_t Tl = T / cp;
    for (int64_t g = 0; g < wholes * cp; g++)
        for (int64_t b = 0; b < B; b++) {
            /* the token after the slice and its target (the MTP head's), none after the last slice */
            int64_t whole = (g / N) * (N / cp) + (g % N) / cp, hi = (g % cp + 1) * Tl, after = (whole * B + b) * T + hi;
            int32_t *nx = next + 2 * (g * B + b);
            nx[0] = hi < T ? tokens[after] : -1;
            nx[1] = hi >= T ? -100 : labels ? labels[after] : hi + 1 < T ? tokens[after + 1] : -100;
            for (int64_t t = 0; t < Tl; t++) {
                int64_t slice = g % cp, at = (whole * B + b) * T + slice * Tl + t, to = (g * B + b) * Tl + t;
                int64_t in_row = slice * Tl + t;
                st[to] = tokens[at];
                sl[to] = labels ? labels[at] : in_row + 1 < T ? tokens[at + 1] : -100;
            }
        }
}

/* Context parallelism with packed documents: the step's pieces (seg_len, tiling its `wholes` x B
 * rows of T) cut at the slices' edges into the trainer's micro-batches' pieces (the order of
 * cut_slices), and past[g B + b]: how many tokens of the piece that row b of micro-batch g starts
 * with lie before its slice (0: a piece starts at the slice's first token); next (cut_slices')
 * loses the token after a slice whose row's last piece ends with it. out_seg holds
 * n_seg x cp at most; returns the count. */
static int64_t cut_pieces(int64_t *out_seg, int64_t *past, int32_t *next, const int64_t *seg_len, int64_t n_seg,
                          int64_t wholes, int64_t B, int64_t T, int cp, int N)
{
    int64_t Tl = T / cp, n_out = 0, rows = wholes * B;
    int64_t first[rows + 1]; /* each row's first piece */
    for (int64_t i = 0, at = 0, r = 0; i < n_seg && r < rows; i++) {
        if (at % T == 0)
            first[r++] = i;
        at += seg_len[i];
    }
    first[rows] = n_seg;
    for (int64_t g = 0; g < wholes * cp; g++)
        for (int64_t b = 0; b < B; b++) {
            int64_t row = ((g / N) * (N / cp) + (g % N) / cp) * B + b, lo = (g % cp) * Tl, hi = lo + Tl;
            past[g * B + b] = 0;
            for (int64_t i = first[row], start = 0; i < first[row + 1]; start += seg_len[i], i++) {
                int64_t a = start > lo ? start : lo, e = start + seg_len[i] < hi ? start + seg_len[i] : hi;
                if (e <= a)
                    continue;
                if (a == lo && start < lo) /* the row's first piece here began in a slice before */
                    past[g * B + b] = lo - start;
                if (e == hi && start + seg_len[i] == hi) /* the row's last piece ends with the slice: nothing goes on */
                    next[2 * (g * B + b)] = -1;
                out_seg[n_out++] = e - a;
            }
        }
    return n_out;
}

/* --svg: the last step as measured (tr->ex.measured_*, one sample per op) over the same step
 * planned, which gives the flat bands, the per-name bars and the predicted peak. */
static int write_measured_svg(const train_args *a, const hyla_trainer *tr, const hyla_model *m)
{
    hyla_plan_config pc;
    memset(&pc, 0, sizeof pc);
    pc.batch = a->batch, pc.seq = a->seq, pc.devices = 1, pc.policy = tr->cfg.policy, pc.unit = tr->cfg.unit;
    pc.param_bytes = pc.grad_bytes = pc.opt_bytes = pc.act_bytes = 4;
    hyla_plan plan;
    HYLA_TRY(hyla_plan_compute(m, &pc, &plan));
    int n = tr->ex.n_measured;
    double *dev = malloc((size_t)(n ? 2 * n : 1) * sizeof *dev); /* [device | host] */
    int rc = dev ? HYLA_OK : hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    for (int i = 0; dev && i < n; i++)
        dev[i] = (double)tr->ex.measured_device[i], dev[n + i] = (double)tr->ex.measured_host[i];
    char title[1024];
    snprintf(title, sizeof title, "%s: batch %lld x seq %lld, %s / %s, measured step", a->preset ? a->preset
             : a->config ? a->config : a->model ? a->model : a->resume, (long long)a->batch, (long long)a->seq,
             tr->cfg.policy.name, hyla_remat_unit_name(tr->cfg.unit));
    if (rc == HYLA_OK && (rc = hyla_measured_write_svg(&plan, tr->ex.measured_seconds, dev, dev + n, n, title, a->svg)) == HYLA_OK)
        printf("memory timeline of the last step: %s\n", a->svg);
    free(dev);
    hyla_plan_free(&plan);
    return rc;
}

/* LoRA: the adapter trained on the frozen model (a resumed adapter checkpoint, --adapter to
 * continue one, or a new one from --lora-rank); *on = 0 for full fine-tuning. */
static int open_adapter(const train_args *a, hyla_model *m, hyla_lora *L, int *on)
{
    *on = a->adapter_resume || a->adapter || a->lora_rank > 0;
    if (!*on)
        return HYLA_OK;
    if (a->adapter_resume || a->adapter) {
        const char *dir = a->adapter_resume ? a->resume : a->adapter;
        HYLA_TRY(hyla_lora_load(L, &m->table, dir));
        if (a->lora_rank > 0 && a->lora_rank != L->r) {
            hyla_error_set(HYLA_ERR_ARG, "--lora-rank %lld: the adapter in %s has r = %lld", (long long)a->lora_rank, dir,
                           (long long)L->r);
            hyla_lora_free(L);
            return HYLA_ERR_ARG;
        }
        if (a->lora_dropout >= 0)
            L->dropout = a->lora_dropout;
        L->dropout_seed = (uint64_t)a->seed ^ 0x6c6f7261ull;
    } else {
        hyla_lora_options o = {.r = a->lora_rank, .alpha = a->lora_alpha > 0 ? a->lora_alpha : 2.0 * (double)a->lora_rank,
                               .dropout = a->lora_dropout > 0 ? a->lora_dropout : 0.0, .targets = a->lora_targets,
                               .seed = (uint64_t)a->seed};
        HYLA_TRY(hyla_lora_create(L, &m->table, &o));
    }
    m->lora = L;
    int64_t n = 0;
    for (int i = 0; i < L->table.n_params; i++)
        n += L->table.params[i].numel;
    hyla_param_counts pc;
    hyla_params_count(&m->table, &pc);
    printf("LoRA: r %lld, alpha %g (scaling %g), dropout %g, %d modules (%s), %lld trainable parameters (%.3f%% of "
           "%lld); base weights frozen\n", (long long)L->r, L->alpha, L->scaling, L->dropout, L->n_modules, L->targets,
           (long long)n, 100.0 * (double)n / (double)pc.total, (long long)pc.total);
    return HYLA_OK;
}

/* Data parallel: before step 1 every rank checks that all run the same job. */
/* Parameter i's share of model_hash (its fp32 values): so a sharded load hashes the layers as it
 * reads them and gets the same value. */
static uint64_t param_hash(const hyla_model *m, int i)
{
    const hyla_param *p = &m->table.params[i];
    return hyla_content_hash(m->w + p->offset, (size_t)p->numel * sizeof(float), 100 + (uint64_t)i);
}

static uint64_t model_hash(const hyla_model *m)
{
    uint64_t h = 0;
    for (int i = 0; m->matrices_in_w && i < m->table.n_params; i++)
        h ^= param_hash(m, i);
    if (!m->matrices_in_w) /* the vectors in w */
        h ^= hyla_content_hash(m->w, m->table.total_floats * sizeof(float), 1);
    if (m->w16 && !m->matrices_in_w) /* bf16 weights only: the matrices live there */
        h ^= hyla_content_hash(m->w16, m->table.total_floats * sizeof(uint16_t), 6);
    if (m->lora)
        h ^= hyla_content_hash(m->lora->w, m->lora->table.total_floats * sizeof(float), 2);
    return h;
}

/* FSDP from a model opened deferred (hyla_model_load_deferred): one parameter at a time read
 * into the arena, hashed, this rank's piece taken and the pages given back; *hash = model_hash
 * of the whole model. No rank holds more than one tensor beside its pieces (a grouped tensor:
 * its layer's parameters it fills), less than a step's gathered part. */
static int load_sharded(hyla_trainer *tr, hyla_model *m, uint64_t *hash)
{
    *hash = m->lora ? hyla_content_hash(m->lora->w, m->lora->table.total_floats * sizeof(float), 2) : 0; /* as model_hash */
    for (int i = 0; i < m->table.n_params; i++) {
        HYLA_TRY(hyla_model_load_param(m, i));
        *hash ^= param_hash(m, i);
        hyla_fsdp_take_param(&tr->fsdp, i);
    }
    return hyla_model_loaded(m);
}

/* model: model_hash before the trainer took it (FSDP keeps pieces only) */
static int ranks_agree(hyla_comm *comm, const train_args *a, uint64_t model, const hyla_data *d,
                       const hyla_train_state *state)
{
    uint64_t data = d->hash ^ hyla_content_hash(&d->pos, sizeof d->pos, 3) ^ hyla_content_hash(&d->n_tokens, 8, 4);
    uint64_t resume = hyla_content_hash(&state->step, sizeof state->step, 5);
    const char *what[] = {"flags", "model weights", "data", "resumed step"};
    uint64_t hash[] = {a->flags_hash, model, data, resume};
    return hyla_ranks_agree(comm, what, hash, 4);
}

/* A checkpoint: replicated, rank 0's state is every rank's; FSDP, rank 0 writes it part by part. */
static int save_checkpoint(const train_args *a, hyla_comm *comm, hyla_trainer *tr, hyla_model *m, hyla_lora *lora,
                           int use_lora, const hyla_train_state *state)
{
    if (!tr->sharded || use_lora) /* replicated (an adapter: always): rank 0's state is every rank's */
        return comm->rank ? HYLA_OK : use_lora ? hyla_checkpoint_save_adapter(a->save, lora, &m->table, &tr->opt, state, a->model)
                                               : hyla_checkpoint_save(a->save, m, &tr->opt, state);
    if (a->save_sharded) /* every rank its own pieces, in parallel */
        return hyla_checkpoint_save_pieces(a->save, comm, m, &tr->fsdp, &tr->opt, state);
    /* FSDP: rank 0 writes, every rank gathers one part at a time as it asks (train/fsdp.h); the
     * whole-table moments are mappings holding only the part in */
    size_t bytes = m->table.total_floats * sizeof(float);
    hyla_adamw whole = tr->opt;
    whole.m = hyla_model_map(bytes), whole.v = hyla_model_map(bytes), whole.n_floats = m->table.total_floats;
    int rc = whole.m && whole.v ? HYLA_OK : hyla_error_set(HYLA_ERR_NOMEM, "fsdp save: cannot map the moments");
    if (rc == HYLA_OK) {
        hyla_fsdp_save_begin(&tr->fsdp, whole.m, whole.v, tr->opt.m, tr->opt.v);
        if (comm->rank == 0) {
            m->fetch = hyla_fsdp_fetch, m->fetch_ctx = &tr->fsdp;
            rc = hyla_checkpoint_save(a->save, m, &whole, state);
            m->fetch = NULL, m->fetch_ctx = NULL;
            int end = hyla_fsdp_save_end(&tr->fsdp); /* the others stop serving, even after a failure */
            rc = rc == HYLA_OK ? end : rc;
        } else {
            rc = hyla_fsdp_serve(&tr->fsdp);
        }
        hyla_fsdp_save_finish(&tr->fsdp);
    }
    hyla_model_unmap(whole.m, bytes);
    hyla_model_unmap(whole.v, bytes);
    return rc;
}

/* --resume: the optimizer state (FSDP: read whole, kept as pieces) */
static int resume_state(const train_args *a, hyla_trainer *tr, hyla_model *m, hyla_lora *lora, int use_lora,
                        hyla_train_state *state)
{
    if (use_lora)
        return hyla_checkpoint_load_adapter_state(a->resume, lora, &tr->opt, state);
    if (m->pieces) /* a sharded checkpoint: what this rank keeps, read from the pieces that hold it */
        return hyla_checkpoint_resume_pieces(a->resume, m, tr->sharded ? &tr->fsdp : NULL, &tr->opt, state);
    if (!tr->sharded)
        return hyla_checkpoint_load_state(a->resume, m, &tr->opt, state);
    /* FSDP (the weights' pieces already read, load_sharded): the moments' pieces, and bf16
     * compute's fp32 masters over the BF16 weights' */
    return hyla_checkpoint_load_state_pieces(a->resume, &m->table, &tr->fsdp.shard, tr->fsdp.piece_elem0, &tr->opt,
                                             tr->fsdp.w, state);
}

static int run(train_args *a, hyla_comm *comm)
{
    int lead = comm->rank == 0; /* rank 0 writes the log, the checkpoints, evaluates and samples */
    if (a->save)
        HYLA_TRY(hyla_outdir_check(a->save, HYLA_OUTDIR_CHECKPOINT));
    hyla_model m;
    HYLA_TRY(open_model(a, &m));
    hyla_lora lora;
    memset(&lora, 0, sizeof lora);
    int use_lora = 0;
    if (open_adapter(a, &m, &lora, &use_lora) != HYLA_OK) {
        hyla_model_free(&m);
        return HYLA_ERR_ARG;
    }
    if (a->bf16_compute && hyla_model_set_compute_bf16(&m, 0) != HYLA_OK) { /* bf16 compute over fp32 masters */
        if (use_lora)
            hyla_lora_free(&lora);
        hyla_model_free(&m);
        return HYLA_ERR_ARG;
    }
    hyla_train_config tc;
    memset(&tc, 0, sizeof tc);
    if (a->mtp_loss_weight < 0) { /* the default: 0.1 where the MTP loss runs and trains the head */
        int head_adapted = 0; /* LoRA: only when the adapter holds some of the head's modules */
        for (int i = 0; m.lora && i < m.lora->table.n_params; i++)
            head_adapted |= m.lora->table.params[i].mtp != 0;
        int trains = !m.lora || head_adapted;
        a->mtp_loss_weight = m.cfg.n_mtp_layers > 0 && trains ? 0.1 : 0.0;
        if (m.cfg.n_mtp_layers > 0 && !trains && comm->rank == 0)
            printf("note: the adapter has none of the MTP head's modules: the head is left as loaded "
                   "(--mtp-loss-weight 0; name mtp.* modules in --lora-targets to adapt it)\n");
    }
    int rc = hyla_remat_unit_parse(a->unit, &tc.unit);
    double limit = 0, host_budget = INFINITY; /* --remat auto may offload up to the store's limit */
    if (rc == HYLA_OK && a->offload_limit && (rc = hyla_parse_size(a->offload_limit, &limit)) != HYLA_OK)
        rc = hyla_error_set(rc, "--offload-limit: '%s' is not a size (e.g. 8GB, 512MiB)", a->offload_limit);
    if (limit > 0)
        host_budget = limit;
    if (rc == HYLA_OK && !strcmp(a->remat, "auto")) { /* the planner picks the policy for this step */
        hyla_plan_config pc;
        memset(&pc, 0, sizeof pc);
        pc.batch = a->batch, pc.seq = a->seq / (a->context_parallel > 1 ? a->context_parallel : 1), pc.devices = 1;
        pc.unit = tc.unit, pc.update_per_layer = a->update_per_layer;
        pc.mtp = a->mtp_loss_weight > 0 || a->mtp_only;
        pc.param_bytes = pc.grad_bytes = pc.opt_bytes = pc.act_bytes = 4;
        double budget = 0;
        hyla_plan plan;
        if ((rc = hyla_parse_size(a->budget ? a->budget : "", &budget)) == HYLA_OK &&
            (rc = hyla_auto_policy(&m, &pc, budget, host_budget, &plan)) == HYLA_OK) {
            char chosen[2048];
            hyla_policy_format(&pc.policy, chosen, sizeof chosen);
            printf("auto policy for %s (planned %.3f GB): custom:%s\n", a->budget, plan.peak_bytes / 1e9, chosen);
            tc.policy = pc.policy;
            hyla_plan_free(&plan);
        }
    } else if (rc == HYLA_OK) {
        rc = hyla_policy_parse(&tc.policy, a->remat);
    }
    if (rc == HYLA_OK)
        rc = hyla_lr_schedule_parse(a->schedule, &tc.schedule.kind);
    int cp = a->context_parallel > 1 ? (int)a->context_parallel : 1; /* (a slice per rank: its length) */
    tc.batch = a->batch, tc.seq = a->seq / cp, tc.accum = a->accum;
    tc.context_parallel = cp;
    tc.adamw = (hyla_adamw_config){a->lr, a->beta1, a->beta2, a->eps, a->wd, a->clip};
    tc.schedule.peak = a->lr, tc.schedule.min_lr = a->min_lr, tc.schedule.warmup = a->warmup;
    tc.schedule.total = a->steps, tc.schedule.decay_fraction = a->decay_fraction;
    char store_path[4200];
    if (a->offload_store && comm->size > 1) { /* every rank its own store */
        snprintf(store_path, sizeof store_path, "%s.rank%d", a->offload_store, comm->rank);
        tc.offload_store = store_path;
    } else {
        tc.offload_store = a->offload_store;
    }
    tc.comm = comm;
    tc.fsdp = a->fsdp;
    tc.no_prefetch = a->no_prefetch;
    tc.overlap_reduce = a->overlap_reduce;
    tc.expert_groups = (int)a->expert_groups;
    /* FSDP's sharded load, after the trainer's setup: a model directory, or a sharded checkpoint
     * given as --model (resumed from, its pieces are read by resume_state) */
    int deferred = m.source_set != NULL || (m.pieces != NULL && !(a->resume && !a->adapter_resume));
    uint64_t weights_hash = comm->size > 1 && !deferred ? model_hash(&m) : 0; /* before FSDP keeps only pieces */
    tc.offload_limit = (size_t)limit;
    tc.update_per_layer = a->update_per_layer;
    tc.mtp_weight = a->mtp_loss_weight;
    tc.mtp_only = a->mtp_only;
    hyla_data data;
    memset(&data, 0, sizeof data);
    if (rc == HYLA_OK)
        rc = open_data(a, &m, &data);
    hyla_trainer tr;
    memset(&tr, 0, sizeof tr);
    if (rc == HYLA_OK)
        rc = hyla_trainer_init(&tr, &m, &tc);
    if (rc == HYLA_OK && deferred)
        rc = load_sharded(&tr, &m, &weights_hash);
    hyla_routing replay = {0, 0, 0, NULL};
    if (rc == HYLA_OK && a->replay && (rc = hyla_routing_read(a->replay, &m.cfg, &replay)) == HYLA_OK &&
        (rc = hyla_trainer_set_replay(&tr, &replay, a->steps)) != HYLA_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", hyla_error_message());
        hyla_error_set(rc, "%s: %s", a->replay, msg);
    }
    hyla_train_state state = {0, 0, (uint64_t)a->seed, "", ""};
    if (rc == HYLA_OK && a->resume) {
        rc = resume_state(a, &tr, &m, &lora, use_lora, &state);
        if (rc == HYLA_OK)
            rc = train_settings_check_data(a, &data, &state);
        data.pos = state.data_pos;
    }
    hyla_data eval_set;
    memset(&eval_set, 0, sizeof eval_set);
    if (rc == HYLA_OK && a->eval_data) /* every rank evaluates its share */
        rc = open_eval_data(a, &m, &eval_set);
    if (rc == HYLA_OK && (rc = ranks_agree(comm, a, weights_hash, &data, &state)) != HYLA_OK) {
        /* every rank found the same disagreement: each says so before the job stops */
        fprintf(stderr, "hyla train: rank %d: error: %s\n", comm->rank, hyla_error_message());
        fflush(stderr);
        comm->barrier(comm);
        comm->abort(comm, 1);
    }
    FILE *log = NULL;
    char log_path[4200]; /* under mpirun rank r > 0 logs its own figures beside: FILE.rank<r> */
    if (a->log_json)
        snprintf(log_path, sizeof log_path, lead ? "%s" : "%s.rank%d", a->log_json, comm->rank);
    if (rc == HYLA_OK && a->log_json && !(log = fopen(log_path, state.step ? "a" : "w")))
        rc = hyla_error_set(HYLA_ERR_IO, "%s: cannot open for writing: %s", log_path, strerror(errno));
    int32_t *tokens = NULL, *labels = NULL, *slice_tokens = NULL, *slice_labels = NULL;
    int64_t *slice_seg = NULL, *slice_past = NULL; /* (packed slices) */
    int32_t *slice_next = NULL;                    /* (the MTP head's token after each slice) */
    int64_t step_rows = comm->size * a->accum * a->batch; /* every rank reads the whole step (trainer.h) */
    if (cp > 1) /* context parallelism: each group of cp ranks shares its sequences, a slice each */
        step_rows = comm->size / cp * a->accum * a->batch;
    if (rc == HYLA_OK) {
        tokens = malloc((size_t)(step_rows * a->seq) * sizeof *tokens);
        labels = hyla_data_labelled(&data) ? malloc((size_t)(step_rows * a->seq) * sizeof *labels) : NULL;
        if (cp > 1) {
            slice_tokens = malloc((size_t)(step_rows * a->seq) * sizeof *slice_tokens);
            slice_labels = malloc((size_t)(step_rows * a->seq) * sizeof *slice_labels);
            slice_past = malloc((size_t)(step_rows * cp) * sizeof *slice_past);
            slice_next = malloc((size_t)(2 * step_rows * cp) * sizeof *slice_next);
        }
        if (!tokens || (hyla_data_labelled(&data) && !labels) ||
            (cp > 1 && (!slice_tokens || !slice_labels || !slice_past || !slice_next)))
            rc = hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    }
    if (rc == HYLA_OK) {
        hyla_param_counts pc;
        hyla_params_count(&m.table, &pc);
        printf("model: %s, %lld layers in %d blocks, %.3f M parameters (%.3f M active); data: %s\n",
               hyla_family_name(m.cfg.family), (long long)m.cfg.n_layers, m.sched.n_blocks, pc.total / 1e6,
               pc.active / 1e6, data.source);
        if (hyla_data_labelled(&data))
            printf("data: %lld documents, %lld tokens (%lld targets), %lld %s of %lld per epoch, %s\n",
                   (long long)data.n_docs, (long long)data.n_tokens, (long long)data.n_targets,
                   (long long)hyla_data_rows_per_epoch(&data, a->seq), data.pack ? "documents (or pieces) packed into rows"
                   : "rows", (long long)a->seq, data.shuffle ? "shuffled per epoch (--seed)" : "in file order");
        print_memory(&tr, &m);
        if (comm->size > 1)
            printf("data parallel: %d ranks x %lld micro-batch(es) of %lld x %lld tokens per step, shard %s "
                   "(gradients summed in micro-batch order)\n", comm->size, (long long)a->accum, (long long)a->batch,
                   (long long)a->seq, a->fsdp ? "fsdp (each rank keeps its pieces of the weights, gradient and AdamW "
                   "moments; layers gathered for use)" : "none (replicated weights and AdamW moments)");
    }
    int64_t epoch = rc == HYLA_OK ? hyla_data_epoch(&data, a->seq) : 0;
    train_progress progress;
    train_progress_start(&progress, state.step);
    for (int64_t step = state.step; rc == HYLA_OK && step < a->steps; step++) {
        if ((rc = hyla_data_next(&data, tokens, labels, step_rows, a->seq)) != HYLA_OK)
            break;
        hyla_step_stats s;
        int last = step + 1 == a->steps;
        if (a->svg && last && lead && (rc = hyla_executor_measure(&tr.ex)) != HYLA_OK)
            break;
        if (data.pack && cp == 1)
            hyla_trainer_set_segments(&tr, data.seg_len, data.n_seg);
        if (cp > 1) /* the trainer's micro-batches: slices of the step's sequences */
            cut_slices(slice_tokens, slice_labels, slice_next, tokens, labels, step_rows / a->batch, a->batch, a->seq, cp,
                       comm->size);
        if (cp > 1 && data.pack) { /* ... and of their pieces */
            int64_t *more = realloc(slice_seg, (size_t)(data.n_seg * cp) * sizeof *more);
            if (!more) {
                rc = hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
                break;
            }
            slice_seg = more;
            int64_t n = cut_pieces(slice_seg, slice_past, slice_next, data.seg_len, data.n_seg, step_rows / a->batch,
                                   a->batch, a->seq, cp, comm->size);
            hyla_trainer_set_segments(&tr, slice_seg, n);
            hyla_trainer_set_context_past(&tr, slice_past);
        }
        if (cp > 1)
            hyla_trainer_set_context_next(&tr, slice_next);
        rc = cp > 1 ? hyla_trainer_step(&tr, slice_tokens, slice_labels, &s) : hyla_trainer_step(&tr, tokens, labels, &s);
        if (rc)
            break;

        train_progress_step(&progress, a, step + 1, &s, hyla_trainer_activation_bytes(&tr) / 1048576.0);
        int64_t now_epoch = hyla_data_epoch(&data, a->seq);
        if (now_epoch != epoch && !data.synthetic) {
            train_progress_note(&progress);
            printf("epoch %lld done at step %lld\n", (long long)now_epoch, (long long)step + 1);
            epoch = now_epoch;
        }
        if (fflush(stdout) != 0 || ferror(stdout)) {
            rc = hyla_error_set(HYLA_ERR_IO, "standard output: write failed at step %lld: %s", (long long)step + 1,
                                strerror(errno));
            break;
        }
        if (log && (rc = log_json(log, log_path, step + 1, &s, hyla_trainer_activation_bytes(&tr), &tr)) != HYLA_OK)
            break;
        state.step = step + 1;
        state.data_pos = data.pos;
        snprintf(state.data_source, sizeof state.data_source, "%s", data.source);
        if ((rc = train_settings_record(a, &data, &state)) != HYLA_OK)
            break;
        if (a->save && ((a->save_every > 0 && state.step % a->save_every == 0) || last)) {
            rc = save_checkpoint(a, comm, &tr, &m, &lora, use_lora, &state);
            if (rc == HYLA_OK) /* no rank runs ahead of a checkpoint not yet complete */
                rc = comm->barrier(comm);
        }
        if (rc == HYLA_OK && a->svg && last && lead)
            rc = write_measured_svg(a, &tr, &m);
        /* every rank alike (each its share of the batches; FSDP gathers layer by layer): --eval-data */
        if (rc == HYLA_OK && a->eval_data && ((a->eval_every > 0 && state.step % a->eval_every == 0) || last)) {
            train_progress_note(&progress);
            rc = run_eval(a, comm, &tr, &m, &eval_set, state.step, log);
        }
    }
    if (rc == HYLA_OK)
        train_progress_end(&progress, a, state.step);
    if (rc == HYLA_OK && a->sample_tokens > 0 && tr.sharded) { /* every rank alike, the layers gathered as used */
        if ((rc = hyla_fsdp_outside_step(&tr.fsdp, 1)) == HYLA_OK)
            rc = sample_greedy(&m, &tr.fsdp.source, lead, a->sample_prompt, a->sample_tokens);
        hyla_fsdp_outside_step(&tr.fsdp, 0);
    } else if (rc == HYLA_OK && a->sample_tokens > 0 && lead) {
        rc = sample_greedy(&m, NULL, 1, a->sample_prompt, a->sample_tokens);
    }
    if (log && fclose(log) != 0 && rc == HYLA_OK)
        rc = hyla_error_set(HYLA_ERR_IO, "%s: write failed: %s", a->log_json, strerror(errno));
    hyla_routing_free(&replay);
    free(tokens);
    free(slice_tokens);
    free(slice_labels);
    free(slice_seg);
    free(slice_past);
    free(slice_next);
    free(labels);
    if (tr.grads)
        hyla_trainer_free(&tr);
    hyla_data_close(&data);
    hyla_data_close(&eval_set);
    m.lora = NULL;
    if (use_lora)
        hyla_lora_free(&lora);
    hyla_model_free(&m);
    return rc;
}

static int train_main(train_args *ap, const hyla_command_spec *specp, hyla_comm *comm);

int hyla_cmd_train(int argc, char **argv)
{
    train_args a = {.mtp_loss_weight = -1, .remat = "full", .unit = "layer", .schedule = "cosine", .sample_prompt = "And ",
                    .steps = 100, .batch = 4, .seq = 128, .accum = 1, .warmup = 10, .seed = 1,
                    .lr = 3e-3, .min_lr = -1, .wd = 0.1, .clip = 1.0, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                    .decay_fraction = 0.2, .lora_dropout = -1, .lora_targets = "all-linear"};
    const hyla_opt opts[] = {
        {"--model", OPT_STRING, &a.model, "DIR", "start from a Hugging Face model directory (or a .gguf file: its "
         "values as fp32)", 0, 0},
        {"--config", OPT_STRING, &a.config, "FILE", "train from scratch with this config.json", 0, 0},
        {"--preset", OPT_STRING, &a.preset, "NAME", "train from scratch with a built-in config (tiny-hybrid, ...)", 0, 0},
        {"--resume", OPT_STRING, &a.resume, "DIR", "continue a run from a checkpoint written by --save", 0, 0},
        {"--data", OPT_STRING, &a.data, "FILE", "token file (HYLATOK1 format, see src/train/data.h)", 0, 0},
        {"--text", OPT_STRING, &a.text, "FILE", "text file, byte-level tokens", 0, 0},
        {"--data-jsonl", OPT_STRING, &a.jsonl, "FILE", "JSONL documents: {\"text\": ...} (all tokens trained) or "
         "{\"messages\": [...]} (ChatML; only assistant tokens trained); one document per row", 0, 0},
        {"--tokenizer", OPT_STRING, &a.tokenizer, "FILE", "tokenizer.json (or a .gguf file) for --data-jsonl (default: "
         "the model's)", 0, 0},
        {"--no-shuffle", OPT_FLAG, &a.no_shuffle, NULL, "--data-jsonl: keep the file's document order (default: "
         "shuffle documents every epoch, seeded by --seed)", 0, 0},
        {"--shuffle", OPT_FLAG, &a.shuffle, NULL, "--data with a HYLATOK2 document file: shuffle documents every epoch", 0, 0},
        {"--pack", OPT_FLAG, &a.pack, NULL, "documents (--data-jsonl, HYLATOK2) share --seq-token rows: attention, the "
         "GDN conv window and recurrent state and RoPE positions restart at every document, no loss crosses one; a "
         "document longer than --seq is split into rows (overlapping by one token) as without packing", 0, 0},
        {"--synthetic", OPT_FLAG, &a.synthetic, NULL, "synthetic learnable sequences (default data)", 0, 0},
        {"--eval-data", OPT_STRING, &a.eval_data, "FILE", "validation data (token file, or .jsonl documents): its loss "
         "at the end and every --eval-every steps, also in --log-json", 0, 0},
        {"--eval-every", OPT_INT, &a.eval_every, "N", "evaluate --eval-data every N steps (default: at the end only)", 0,
         INT64_MAX},
        {"--steps", OPT_INT, &a.steps, "N", "optimizer steps (default 100)", 1, INT64_MAX},
        {"--batch", OPT_INT, &a.batch, "N", "sequences per micro-batch (default 4)", 1, 1 << 20},
        {"--seq", OPT_INT, &a.seq, "N", "tokens per sequence (default 128)", 2, 1 << 24},
        {"--accum", OPT_INT, &a.accum, "N", "micro-batches per step (gradient accumulation, default 1)", 1, 1 << 20},
        {"--lr", OPT_DOUBLE, &a.lr, "X", "peak learning rate (default 3e-3)", 0, 0},
        {"--min-lr", OPT_DOUBLE, &a.min_lr, "X", "final learning rate (default lr/10)", 0, 0},
        {"--warmup", OPT_INT, &a.warmup, "N", "linear warmup steps (default 10)", 0, INT64_MAX},
        {"--schedule", OPT_STRING, &a.schedule, "cosine|wsd|constant", "learning-rate schedule after warmup", 0, 0},
        {"--decay-fraction", OPT_DOUBLE, &a.decay_fraction, "X", "wsd: fraction of steps spent decaying (0.2)", 0, 0},
        {"--weight-decay", OPT_DOUBLE, &a.wd, "X", "AdamW decoupled weight decay on 2-D+ weights (0.1)", 0, 0},
        {"--clip", OPT_DOUBLE, &a.clip, "X", "global gradient-norm clip, 0 = off (default 1.0)", 0, 0},
        {"--beta1", OPT_DOUBLE, &a.beta1, "X", "AdamW beta1 (0.9)", 0, 0},
        {"--beta2", OPT_DOUBLE, &a.beta2, "X", "AdamW beta2 (0.95)", 0, 0},
        {"--eps", OPT_DOUBLE, &a.eps, "X", "AdamW epsilon (1e-8)", 0, 0},
        {"--seed", OPT_INT, &a.seed, "N", "initialisation and synthetic-data seed (default 1)", 0, INT64_MAX},
        {"--remat", OPT_STRING, &a.remat, "POLICY", "none, full (default), minimal, minimal_offloaded, ..., custom:NAME=device|remat|offload,...,"
         " auto", 0, 0},
        {"--memory-budget", OPT_STRING, &a.budget, "SIZE", "with --remat auto: activation + state budget (e.g. 2GB)", 0, 0},
        {"--remat-unit", OPT_STRING, &a.unit, "UNIT", "layer (default), block or part", 0, 0},
        {"--offload-store", OPT_STRING, &a.offload_store, "PATH", "host store file for offloaded checkpoints (must not "
         "exist; default: an anonymous file in $TMPDIR)", 0, 0},
        {"--update-per-layer", OPT_FLAG, &a.update_per_layer, NULL, "apply AdamW to each layer as soon as its "
         "gradients are complete (needs --accum 1 --clip 0; gradients of one remat unit at a time)", 0, 0},
        {"--offload-limit", OPT_STRING, &a.offload_limit, "SIZE", "host store size limit (default: none)", 0, 0},
        {"--threads", OPT_INT, &a.threads, "N", "OpenMP threads (default: all cores; 1 per rank under mpirun)", 0, 4096},
        {"--no-prefetch", OPT_FLAG, &a.no_prefetch, NULL, "FSDP: gather each layer only when it is needed (default: "
         "the next one's gather runs while the current one computes); for measuring what the prefetch hides", 0, 0},
        {"--overlap-reduce", OPT_FLAG, &a.overlap_reduce, NULL, "FSDP: a unit's gradient reduce-scatters run while "
         "the next unit's backward computes (costs a second gradient window and the in-flight unit's staging; "
         "with the prefetch)", 0, 0},
        {"--expert-groups", OPT_INT, &a.expert_groups, "G", "FSDP: an MoE layer's routed experts are gathered, "
         "applied and their gradients reduce-scattered G groups at a time inside the experts ops, not with their "
         "layer (G divides the expert count; hyla plan --expert-groups G plans it)", 1, 1 << 20},
        {"--context-parallel", OPT_INT, &a.context_parallel, "C", "split every sequence into C slices, one per rank of "
         "a group of C ranks (C divides the ranks; the groups are data parallel): the Gated DeltaNet layers pass the "
         "conv window and the state from rank to rank, attention gathers the keys and values; --seq must divide by C",
         1, 1 << 20},
        {"--shard", OPT_STRING, &a.shard, "fsdp|none", "under mpirun: fsdp (default) = each rank keeps its pieces of "
         "the weights, gradients and AdamW moments, layers gathered just before use; none = replicated. Either way "
         "gradients are summed over ranks in a fixed order (bit-identical to one process)", 0, 0},
        HYLA_OPT_ACT_DTYPE(a.dtypes),
        {"--param-dtype", OPT_STRING, &a.dtypes.param, "f32|bf16", "master weights: f32 (bf16 compute is --act-dtype); "
         "with LoRA, bf16 reads the frozen base as bf16 only (half its memory, no fp32 copy; implies --act-dtype bf16)",
         0, 0},
        HYLA_OPT_GRAD_DTYPE(a.dtypes),
        HYLA_OPT_OPT_DTYPE(a.dtypes),
        {"--mtp-loss-weight", OPT_DOUBLE, &a.mtp_loss_weight, "X", "loss = main + X x the MTP head's cross-entropy "
         "(targets two tokens ahead; default 0.1 for a model with an MTP head, 0 = off: the head is left as loaded)", 0, 0},
        {"--mtp-only", OPT_FLAG, &a.mtp_only, NULL, "train the MTP head alone on the frozen trunk (re-fit the draft head "
         "after a fine-tune)", 0, 0},
        {"--lora-rank", OPT_INT, &a.lora_rank, "R", "train a LoRA adapter of rank R on the frozen --model (PEFT format; "
         "--save writes adapter_config.json + adapter_model.safetensors)", 1, 65536},
        {"--lora-alpha", OPT_DOUBLE, &a.lora_alpha, "A", "LoRA alpha: the update is scaled by alpha / r (default 2 r)", 0, 0},
        {"--lora-dropout", OPT_DOUBLE, &a.lora_dropout, "P", "dropout on the adapters' input (default 0)", 0, 0},
        {"--lora-targets", OPT_STRING, &a.lora_targets, "LIST", "all-linear (default: every projection of the layers "
         "but the router) or module names: q_proj,k_proj,v_proj,o_proj,in_proj_qkvz,in_proj_ba,in_proj_qkv,in_proj_z,"
         "out_proj,gate_proj,up_proj,down_proj,shared_expert_gate,...", 0, 0},
        {"--adapter", OPT_STRING, &a.adapter, "DIR", "continue training this PEFT LoRA adapter (a new run)", 0, 0},
        {"--save", OPT_STRING, &a.save, "DIR", "checkpoint directory (written at the end and every --save-every); for "
         "LoRA, a PEFT adapter directory", 0, 0},
        {"--save-every", OPT_INT, &a.save_every, "N", "also checkpoint every N steps", 0, INT64_MAX},
        {"--save-sharded", OPT_FLAG, &a.save_sharded, NULL, "with --shard fsdp: every rank writes its own pieces of the "
         "weights and moments in parallel (pieces/ + hyla-pieces.json); resumes on any rank count, hyla convert "
         "consolidates it", 0, 0},
        {"--log-json", OPT_STRING, &a.log_json, "FILE", "one JSON object per step", 0, 0},
        {"--svg", OPT_STRING, &a.svg, "FILE", "write the measured memory timeline of the last step as SVG", 0, 0},
        {"--replay-routing", OPT_STRING, &a.replay, "FILE", "force these experts (HYLAROU1, e.g. from hyla generate "
         "--record-routing); rows consumed batch*seq per micro-batch", 0, 0},
        {"--sample", OPT_INT, &a.sample_tokens, "N", "after training, greedily continue --prompt by N bytes", 0, 1 << 20},
        {"--prompt", OPT_STRING, &a.sample_prompt, "TEXT", "prompt for --sample (default \"And \")", 0, 0},
        {0},
    };
    unsigned char given[sizeof opts / sizeof *opts] = {0};
    const hyla_command_spec spec = {"train", "(--preset NAME | --config FILE | --model DIR | --resume DIR) [options]",
                                    "Train a hybrid model; prints one line per step.", opts, 0, 0, given};
    const char *pos[1];
    int npos, r = hyla_opts_parse(&spec, argc, argv, pos, &npos);
    if (r)
        return r < 0 ? 2 : 0;
    uint64_t fh = 0;
    for (int i = 0; i < argc; i++)
        fh = hyla_content_hash(argv[i], strlen(argv[i]) + 1, fh);
    a.flags_hash = fh;
    hyla_comm *comm = hyla_comm_mpi_open(NULL, NULL); /* one process unless mpirun launched this one */
    if (!comm) {
        fprintf(stderr, "hyla train: error: MPI_Init failed\n");
        return 1;
    }
    a.ranks = comm->size;
    if (comm->rank != 0 && !freopen("/dev/null", "w", stdout)) /* rank 0 prints */
        return 1;
    r = train_main(&a, &spec, comm);
    if (r && comm->size > 1) { /* the other ranks are blocked in a collective: stop the job */
        fflush(stdout);
        fflush(stderr);
        /* ranks that fail alike (a bad file, a checkpoint of another model) fail within moments of
         * each other: let them say so before the abort takes them down */
        struct timespec pause = {0, 300 * 1000 * 1000};
        nanosleep(&pause, NULL);
        comm->abort(comm, r);
    }
    hyla_comm_mpi_close(comm);
    return r;
}

static int train_main(train_args *ap, const hyla_command_spec *specp, hyla_comm *comm)
{
    train_args a = *ap;
    const hyla_command_spec spec = *specp;
    a.adapter_resume = a.resume && hyla_checkpoint_is_adapter(a.resume);
    int sources = !!a.model + !!a.config + !!a.preset + !!a.resume - (a.adapter_resume && a.model);
    if (sources != 1) {
        fprintf(stderr, "hyla train: give exactly one of --preset, --config, --model, --resume (an adapter checkpoint "
                        "may take --model: its base)\n");
        return 2;
    }
    if ((a.lora_rank || a.adapter || hyla_opt_given(&spec, "--lora-alpha") || hyla_opt_given(&spec, "--lora-dropout") ||
         hyla_opt_given(&spec, "--lora-targets")) && !a.model && !a.adapter_resume) {
        fprintf(stderr, "hyla train: LoRA (--lora-*, --adapter) trains an adapter on a model: give --model DIR\n");
        return 2;
    }
    if ((a.lora_alpha || hyla_opt_given(&spec, "--lora-targets")) && a.adapter) {
        fprintf(stderr, "hyla train: --adapter brings its own %s; leave it out\n", a.lora_alpha ? "--lora-alpha" : "--lora-targets");
        return 2;
    }
    if (hyla_opt_given(&spec, "--lora-dropout") && !(a.lora_dropout >= 0 && a.lora_dropout < 1)) {
        fprintf(stderr, "hyla train: --lora-dropout must be in [0, 1)\n");
        return 2;
    }
    if (hyla_opt_given(&spec, "--lora-alpha") && !(a.lora_alpha > 0 && isfinite(a.lora_alpha))) {
        fprintf(stderr, "hyla train: --lora-alpha must be a positive number\n");
        return 2;
    }
    char state_path[4200];
    snprintf(state_path, sizeof state_path, "%s/trainer_state.json", a.resume ? a.resume : "");
    if (a.resume && hyla_file_exists(state_path)) { /* settings not given again come from the checkpoint
                                                     * (train_settings.c); a missing state is reported by the load */
        hyla_train_state st;
        if (hyla_checkpoint_read_state(a.resume, &st) || train_settings_restore(&a, &spec, &st))
            return hyla_cli_fail("train");
    }
    if (a.adapter_resume && !a.model) {
        fprintf(stderr, "hyla train: --resume %s is a LoRA adapter checkpoint that does not name its base model: give "
                        "--model DIR\n", a.resume);
        return 2;
    }
    if (!!a.data + !!a.text + !!a.jsonl + a.synthetic > 1) {
        fprintf(stderr, "hyla train: give at most one of --data, --text, --data-jsonl, --synthetic\n");
        return 2;
    }
    if (a.eval_every && !a.eval_data) {
        fprintf(stderr, "hyla train: --eval-every needs --eval-data FILE\n");
        return 2;
    }
    if (a.pack && (a.text || a.synthetic || (!a.jsonl && !a.data))) {
        fprintf(stderr, "hyla train: --pack needs documents: --data-jsonl F or --data F (HYLATOK2)\n");
        return 2;
    }
    if ((a.no_shuffle && !a.jsonl) || (a.tokenizer && !a.jsonl) || (a.shuffle && !a.data) || (a.shuffle && a.no_shuffle)) {
        fprintf(stderr, "hyla train: %s\n", a.shuffle && a.no_shuffle ? "--shuffle and --no-shuffle contradict each other"
                        : a.shuffle ? "--shuffle applies to --data (a HYLATOK2 document file)"
                        : a.no_shuffle ? "--no-shuffle applies to --data-jsonl" : "--tokenizer applies to --data-jsonl");
        return 2;
    }
    if (!(a.lr > 0) || a.wd < 0 || a.clip < 0 || !(a.beta1 >= 0 && a.beta1 < 1) || !(a.beta2 >= 0 && a.beta2 < 1) ||
        !(a.eps > 0) || a.decay_fraction < 0 || a.decay_fraction > 1) {
        fprintf(stderr, "hyla train: need lr > 0, weight decay >= 0, clip >= 0, betas in [0, 1), eps > 0, "
                        "decay fraction in [0, 1]\n");
        return 2;
    }
    if (hyla_opt_given(&spec, "--mtp-loss-weight") && !(a.mtp_loss_weight >= 0 && a.mtp_loss_weight <= 1e6)) {
        fprintf(stderr, "hyla train: --mtp-loss-weight must be in [0, 1e6] (0: no MTP loss)\n");
        return 2;
    }
    int frozen_base = a.lora_rank > 0 || a.adapter || a.adapter_resume; /* LoRA: bf16 base weights allowed */
    if (hyla_cli_precision(&a.dtypes, frozen_base ? HYLA_TRAIN_FROZEN_BASE : 1, &a.bf16_compute, &a.bf16_weights)) {
        hyla_cli_fail("train");
        return 2;
    }
    if (a.min_lr < 0)
        a.min_lr = a.lr / 10;
    if (a.shard && strcmp(a.shard, "none") && strcmp(a.shard, "fsdp")) {
        fprintf(stderr, "hyla train: --shard '%s': none or fsdp\n", a.shard);
        return 2;
    }
    a.fsdp = a.shard ? !strcmp(a.shard, "fsdp") : comm->size > 1; /* the default over several ranks: fsdp */
    if (a.fsdp && comm->size == 1) {
        fprintf(stderr, "hyla train: --shard fsdp: sharding needs more than one process (launch with mpirun -np N)\n");
        return 2;
    }
    if (a.overlap_reduce && !a.fsdp) {
        fprintf(stderr, "hyla train: --overlap-reduce overlaps FSDP's reduce-scatters: it needs --shard fsdp under mpirun\n");
        return 2;
    }
    if (a.context_parallel > 1) {
        const char *why = comm->size % a.context_parallel ? "C must divide the ranks (groups of C ranks share a sequence)"
                          : a.seq % a.context_parallel ? "--seq must divide into the slices"
                          : a.replay ? "--replay-routing is not built with it" : NULL;
        if (why) {
            fprintf(stderr, "hyla train: --context-parallel %lld: %s\n", (long long)a.context_parallel, why);
            return 2;
        }
    }
    if (a.expert_groups > 1 && !a.fsdp) {
        fprintf(stderr, "hyla train: --expert-groups: expert groups are how FSDP gathers an MoE layer: it needs "
                "--shard fsdp under mpirun\n");
        return 2;
    }
    if (a.save_sharded && (!a.fsdp || frozen_base)) {
        fprintf(stderr, "hyla train: --save-sharded: %s\n", frozen_base ? "a LoRA checkpoint is the small adapter: "
                "drop --save-sharded" : "every FSDP rank writes its own pieces: it needs --shard fsdp under mpirun -np N");
        return 2;
    }
    hyla_cli_set_threads(a.threads ? a.threads : comm->size > 1 ? 1 : 0);
    if (run(&a, comm) == HYLA_OK)
        return 0;
    if (comm->size == 1)
        return hyla_cli_fail("train");
    fprintf(stderr, "hyla train: rank %d: error: %s\n", comm->rank, hyla_error_message());
    return 1;
}
