/* Inference benchmark: prefill tokens/s (prompt of SEQ tokens, chunked delta rule) and decode
 * tokens/s (NEW tokens, recurrent rule, KV/state caches), fp32; decode bandwidth as bytes of
 * active weights read per token x tokens/s, as % of the machine's DRAM read bandwidth measured in
 * the same run (bench/dram_bandwidth.h): decode_pct_of_dram_bw against the mean of the rates read
 * right before and right after the timed run whose decode is reported (dram_gbs_beside_decode; a
 * shared VM's bandwidth swings by 2x within minutes), decode_pct_of_best_dram_bw against the best
 * rate of the whole run (dram_gbs: before loading, beside each run, after); HYLA_DRAM_GBS overrides
 * both. decode_interleaved: one more decode of 64 tokens after the same prompt with a DRAM read between
 * every 8 of them (the rates at the same moments; see decode_interleaved below; not run with HYLA_DRAM_GBS).
 * decode_profile: seconds per
 * decoded token by op, from one more run with a 1-token prompt (the profile's timers on);
 * prefill_profile_ms: milliseconds of one SEQ-token prefill by op, from a run with the timers on;
 * prefill_gemm_gflop: the GEMM work of each op that has some (GFLOP), for its rate and % of peak.
 * DTYPE bf16: the model's matrices read straight into bf16 (hyla_model_load_bf16), bf16 compute;
 * the resident set after loading is reported either way.
 * MODEL_DIR may be a .gguf file: its tensors are read in place in their stored types (DTYPE is then
 * "gguf"), and the weight bytes per token are the stored bytes of the rows a token reads.
 * usage: infer_bench MODEL_DIR [SEQ=512] [NEW=128] [DTYPE=f32|bf16]   (one JSON object) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/profile.h"
#include "core/quant.h"
#include "dram_bandwidth.h"
#include "infer/generate.h"
#include "io/gguf_read.h"
#include "model/model.h"

/* One generation with the profile's timers on (hyla_prof holds its per-op seconds after). */
static int profiled_generate(const hyla_model *m, const int32_t *const *prompts, int64_t len, const hyla_sampling *s,
                             int32_t *out, hyla_generate_stats *st)
{
    int64_t n_out;
    hyla_prof.enabled = 1;
    hyla_prof_reset();
    int rc = hyla_generate(m, 1, prompts, &len, s, &out, &n_out, NULL, NULL, st);
    hyla_prof.enabled = 0;
    if (rc)
        fprintf(stderr, "infer_bench: %s\n", hyla_error_message());
    return rc;
}

/* The decode and the memory's read rate at the same moments: a DRAM read (best of two passes over
 * 512 MiB, bench/dram_bandwidth.h) before the first decode step and after every IL_WINDOW steps, from
 * the token callback; each window's rate against the mean of the reads on both sides of it. The
 * read evicts the caches, so a window starts as a decode step after other work does. */
enum { IL_WINDOW = 8, IL_WINDOWS = 8, IL_MIB = 512 };

/* Seconds of CPU time the hypervisor gave other guests (steal, all CPUs summed; /proc/stat's
 * aggregate line), -1 where it cannot be read: beside a figure, whether the VM lost its cores during it
 * (a decode's ~150 barriers a token wait on a descheduled thread; a plain read has one a pass). */
static double steal_seconds(void)
{
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                       &v[6], &v[7])
              : 0;
    if (f)
        fclose(f);
    return n == 8 ? (double)v[7] / (double)sysconf(_SC_CLK_TCK) : -1.0;
}

typedef struct {
    float *buf;                /* [IL_MIB MiB] */
    int64_t tokens;            /* tokens seen */
    int n_reads;
    double read_gbs[IL_WINDOWS + 1];
    double read_end[IL_WINDOWS + 1], read_start[IL_WINDOWS + 1]; /* hyla_now() around each read */
} interleaved;

static int interleaved_cb(void *ctx, int64_t b, int32_t token)
{
    (void)b, (void)token;
    interleaved *il = ctx;
    if (il->tokens++ % IL_WINDOW == 0 && il->n_reads <= IL_WINDOWS) {
        il->read_start[il->n_reads] = hyla_now();
        il->read_gbs[il->n_reads] = dram_read_gbs_buffer(il->buf, IL_MIB, 2);
        il->read_end[il->n_reads++] = hyla_now();
    }
    return 0;
}

/* Prints the interleaved figures as a JSON member (",\"decode_interleaved\": {...}"); 0 when it ran. */
static int decode_interleaved(const hyla_model *m, const int32_t *prompt, int64_t T, double bytes_per_token)
{
    interleaved il = {.buf = dram_buffer(IL_MIB)};
    int32_t *out = malloc((IL_WINDOW * IL_WINDOWS + 1) * sizeof *out);
    hyla_sampling s = {0, 0, 1.0, 1, IL_WINDOW * IL_WINDOWS + 1, NULL, 0, 0};
    const int32_t *prompts[1] = {prompt};
    int64_t n_out;
    hyla_generate_stats st;
    if (!il.buf || !out) {
        fprintf(stderr, "infer_bench: cannot allocate the interleaved decode's %d MiB read buffer\n", IL_MIB);
        free(out);
        if (il.buf)
            dram_buffer_free(il.buf, IL_MIB);
        return 1;
    }
    double steal0 = steal_seconds(), t0 = hyla_now();
    int rc = hyla_generate(m, 1, prompts, &T, &s, &out, &n_out, interleaved_cb, &il, &st);
    double steal1 = steal_seconds(), wall = hyla_now() - t0;
    if (rc || il.n_reads != IL_WINDOWS + 1) {
        fprintf(stderr, "infer_bench: the interleaved decode did not run: %s\n", rc ? hyla_error_message() : "stopped");
        rc = 1;
    } else {
        double decode_s = 0.0, read_mean = 0.0, ratio[IL_WINDOWS];
        for (int w = 0; w < IL_WINDOWS; w++) {
            double t = il.read_start[w + 1] - il.read_end[w], gbs = IL_WINDOW * bytes_per_token / t * 1e-9;
            decode_s += t;
            ratio[w] = 200.0 * gbs / (il.read_gbs[w] + il.read_gbs[w + 1]);
        }
        for (int r = 0; r <= IL_WINDOWS; r++)
            read_mean += il.read_gbs[r] / (IL_WINDOWS + 1);
        double tps = IL_WINDOW * IL_WINDOWS / decode_s, lo = ratio[0], hi = ratio[0];
        for (int w = 1; w < IL_WINDOWS; w++)
            lo = ratio[w] < lo ? ratio[w] : lo, hi = ratio[w] > hi ? ratio[w] : hi;
        /* the share of all CPUs' time (prefill and reads included) the hypervisor gave elsewhere */
        double cpus = (double)sysconf(_SC_NPROCESSORS_ONLN);
        double steal = steal0 >= 0 && steal1 >= 0 ? 100.0 * (steal1 - steal0) / (wall * cpus) : -1.0;
        printf(", \"decode_interleaved\": {\"window_tokens\": %d, \"windows\": %d, \"decode_tokens_per_s\": %.1f, "
               "\"dram_gbs_mean\": %.1f, \"decode_pct_of_dram_bw\": %.1f, \"window_pct_min\": %.1f, "
               "\"window_pct_max\": %.1f, \"steal_pct\": %.1f}",
               IL_WINDOW, IL_WINDOWS, tps, read_mean, 100.0 * tps * bytes_per_token * 1e-9 / read_mean, lo, hi, steal);
    }
    free(out);
    dram_buffer_free(il.buf, IL_MIB);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: infer_bench MODEL_DIR [SEQ] [NEW]\n");
        return 2;
    }
    int64_t T = argc > 2 ? atoll(argv[2]) : 512, NEW = argc > 3 ? atoll(argv[3]) : 128;
    const char *bw_env = getenv("HYLA_DRAM_GBS");
    double dram = bw_env ? atof(bw_env) : dram_read_gbs(); /* (again after the runs: the better of the two) */
    int bf16 = argc > 4 && !strcmp(argv[4], "bf16"), gguf = hyla_is_gguf_path(argv[1]);
    hyla_model m;
    if (gguf ? hyla_model_load_gguf(&m, argv[1]) : bf16 ? hyla_model_load_bf16(&m, argv[1]) : hyla_model_load(&m, argv[1])) {
        fprintf(stderr, "infer_bench: %s\n", hyla_error_message());
        return 1;
    }
    long pages = 0, resident = 0;
    FILE *statm = fopen("/proc/self/statm", "r");
    if (statm && fscanf(statm, "%ld %ld", &pages, &resident) != 2)
        resident = 0;
    if (statm)
        fclose(statm);
    double rss_after_load = (double)resident * (double)sysconf(_SC_PAGESIZE);
    int32_t *prompt = malloc((size_t)T * sizeof *prompt), *out = malloc((size_t)NEW * sizeof *out);
    for (int64_t i = 0; i < T; i++)
        prompt[i] = (int32_t)((i * 7919 + 13) % m.cfg.vocab);
    hyla_sampling s = {0, 0, 1.0, 1, NEW, NULL, 0, 0};
    const int32_t *prompts[1] = {prompt};
    int64_t n_out;
    hyla_generate_stats st, best = {.prefill_seconds = 1e30, .decode_seconds = 1e30};
    /* the DRAM read rate right before and after each timed run: the VM's rate swings between ~45
     * and ~85 GB/s within minutes, so the decode's share is taken against the mean of the two
     * beside the run whose decode is reported (besides the best of the whole run) */
    double beside = 0.0, before = bw_env ? dram : dram_read_gbs_passes(2, 512);
    for (int rep = 0; rep < 3; rep++) { /* first run warms up; keep the best of the others */
        if (hyla_generate(&m, 1, prompts, &T, &s, &out, &n_out, NULL, NULL, &st)) {
            fprintf(stderr, "infer_bench: %s\n", hyla_error_message());
            return 1;
        }
        double after = bw_env ? dram : dram_read_gbs_passes(2, 512);
        if (rep > 0 && st.prefill_seconds < best.prefill_seconds)
            best.prefill_seconds = st.prefill_seconds, best.prefill_tokens = st.prefill_tokens;
        if (rep > 0 && st.decode_seconds < best.decode_seconds)
            best.decode_seconds = st.decode_seconds, best.decode_tokens = st.decode_tokens, beside = 0.5 * (before + after);
        dram = after > dram ? after : dram;
        before = after;
    }
    /* where the prefill's time goes: the prompt with one new token (nothing decoded), timers on */
    hyla_sampling one_new = s;
    one_new.max_new = 1;
    if (profiled_generate(&m, prompts, T, &one_new, out, &st))
        return 1;
    int n_prefill_ops = hyla_prof.n;
    const char *prefill_name[HYLA_PROF_MAX];
    double prefill_ms[HYLA_PROF_MAX], prefill_gflop[HYLA_PROF_MAX], prefill_gemm_ms = 1e3 * hyla_prof.gemm_seconds;
    for (int i = 0; i < n_prefill_ops; i++)
        prefill_name[i] = hyla_prof.name[i], prefill_ms[i] = 1e3 * hyla_prof.seconds[i],
        prefill_gflop[i] = 1e-9 * hyla_prof.flops[i];
    /* where a decoded token's time goes: a 1-token prompt, so nearly all of it is decode */
    int64_t one = 1;
    if (profiled_generate(&m, prompts, one, &s, out, &st))
        return 1;
    if (!bw_env) {
        double again = dram_read_gbs();
        dram = again > dram ? again : dram;
    }
    double tokens = (double)(st.decode_tokens + 1);
    hyla_param_counts pc;
    hyla_params_count(&m.table, &pc);
    /* weights read per decoded token: every active parameter except the embedding table, of
     * which one row is read */
    double wbytes = bf16 ? 2.0 : 4.0; /* bf16: the matrices; the small fp32 vectors are neglected */
    double bytes_per_token = wbytes * (double)(pc.active - m.cfg.vocab * m.cfg.hidden + m.cfg.hidden);
    if (m.cfg.tie_word_embeddings)
        bytes_per_token += wbytes * (double)(m.cfg.vocab * m.cfg.hidden);
    if (gguf) { /* the stored bytes of every row a token reads: all of each matrix, k / E of the routed
                 * experts', lm_head whole (the tied embedding's), one embedding row (neglected) */
        bytes_per_token = 0;
        for (int i = 0; i < m.table.n_params; i++) {
            const hyla_qmat *q = &m.qw[i];
            hyla_role role = m.table.params[i].role;
            if (!q->row || (role == HYLA_P_EMBED && !m.cfg.tie_word_embeddings))
                continue;
            double b = (double)hyla_qmat_bytes(q);
            if (role == HYLA_P_MOE_GATE_UP || role == HYLA_P_MOE_DOWN)
                b *= (double)m.cfg.top_k / (double)m.cfg.n_experts;
            bytes_per_token += b;
        }
    }
    double pf = best.prefill_tokens / best.prefill_seconds, dc = best.decode_tokens / best.decode_seconds;
    if (beside <= 0.0) /* (no timed decode replaced the first) */
        beside = dram;
    printf("{\"engine\": \"hyla\", \"dtype\": \"%s\", \"resident_bytes_after_load\": %.0f, \"seq\": %lld, \"new\": %lld, \"params_total\": %lld, \"params_active\": %lld, "
           "\"prefill_tokens_per_s\": %.1f, \"decode_tokens_per_s\": %.1f, \"decode_weight_bytes_per_token\": %.4g, "
           "\"decode_bandwidth_gbs\": %.1f, \"decode_pct_of_dram_bw\": %.1f, \"dram_gbs_beside_decode\": %.1f, "
           "\"decode_pct_of_best_dram_bw\": %.1f, \"dram_gbs\": %.1f, \"dram_measured\": %s, "
           "\"decode_profile_ms_per_token\": {",
           gguf ? "gguf" : bf16 ? "bf16" : "f32", rss_after_load, (long long)T, (long long)NEW, (long long)pc.total, (long long)pc.active, pf, dc, bytes_per_token,
           dc * bytes_per_token / 1e9, 100.0 * dc * bytes_per_token / 1e9 / beside, beside,
           100.0 * dc * bytes_per_token / 1e9 / dram, dram, bw_env ? "false" : "true");
    for (int i = 0; i < hyla_prof.n; i++)
        printf("%s\"%s\": %.4f", i ? ", " : "", hyla_prof.name[i], 1e3 * hyla_prof.seconds[i] / tokens);
    printf(", \"gemm\": %.4f}, \"prefill_profile_ms\": {", 1e3 * hyla_prof.gemm_seconds / tokens);
    for (int i = 0; i < n_prefill_ops; i++)
        printf("%s\"%s\": %.2f", i ? ", " : "", prefill_name[i], prefill_ms[i]);
    printf(", \"gemm\": %.2f}, \"prefill_gemm_gflop\": {", prefill_gemm_ms); /* each op's GEMM work (profile.h) */
    for (int i = 0, first = 1; i < n_prefill_ops; i++)
        if (prefill_gflop[i] > 0)
            printf("%s\"%s\": %.2f", first ? "" : ", ", prefill_name[i], prefill_gflop[i]), first = 0;
    printf("}");
    if (!bw_env && decode_interleaved(&m, prompt, T, bytes_per_token))
        return 1;
    printf("}\n");
    free(prompt);
    free(out);
    hyla_model_free(&m);
    return 0;
}
