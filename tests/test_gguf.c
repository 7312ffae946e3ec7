/* GGUF reading and the ggml block types. Exits non-zero on any failure.
 *
 *   dequantization: every type hyla reads against tests/data/ggml_dequant_golden.bin, made by the
 *     `gguf` package's numpy dequantizers (tests/gguf/make_dequant_golden.py): bit-identical (both
 *     evaluate ggml's products in the same order in float32, without fused multiply-adds).
 *   products: hyla_linear_q on those blocks (streaming kernels, n <= 8, with fp32 and with int8
 *     activations, and the dequantize + sgemm path) against a double-precision sum over the
 *     dequantized values, within the fp32 summation bound plus (int8) the activations' rounding;
 *     permuted columns and rows of mixed types.
 *   four rows at once: the decode kernel for 4 Q4_K / Q5_K rows gives each row's one-row value bit
 *     for bit (random blocks, 5 rows' worth of 4 blocks).
 *   activation rounding: the AVX-512 quantizers (Q8_K per 256, Q8_0 per 32) give the scalar
 *     code's levels, scales and sums bit for bit, on rows with ties for the largest magnitude, zero
 *     blocks, tiny and huge values.
 *   quantizing: hyla_ggml_from_f32 on 300,000 values (pieces of 256 blocks on the threads) gives
 *     the same bytes with 1 and 2 threads, and each piece the bytes of that piece quantized alone,
 *     for Q8_0, Q6_K, Q5_K and Q4_K (their byte-identity to llama.cpp's quantizer is
 *     tests/gguf/conformance.py's).
 *   reader: files built byte by byte here (independently of hyla's writer): a good one parses and
 *     reads back; every truncation of it, and a table of lying files (counts, lengths, types,
 *     dimensions, offsets, alignment, duplicates), fails with an error naming what is wrong. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/error.h"
#include "core/quant.h"
#include "core/quant_kernels.h"
#include "io/gguf.h"
#include "io/gguf_read.h"

#include <omp.h>

/* ---- golden dequantization ------------------------------------------------------------------ */

typedef struct {
    hyla_ggml_type type;
    int64_t n;
    unsigned char *bytes;
    float *values;
} golden;

static int read_golden(golden *g, int max, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        CHECK(0, "cannot open %s", path);
        return 0;
    }
    int n = 0;
    uint32_t hdr[2];
    while (n < max && fread(hdr, 4, 2, f) == 2) {
        g[n].type = (hyla_ggml_type)hdr[0];
        g[n].n = hdr[1];
        size_t nb = hyla_ggml_bytes(g[n].type, (size_t)g[n].n);
        CHECK(hyla_ggml_type_supported(hdr[0]) && nb > 0, "golden type %u unknown to hyla", hdr[0]);
        g[n].bytes = malloc(nb);
        g[n].values = malloc((size_t)g[n].n * sizeof(float));
        if (fread(g[n].bytes, 1, nb, f) != nb || fread(g[n].values, 4, (size_t)g[n].n, f) != (size_t)g[n].n) {
            CHECK(0, "%s: truncated", path);
            break;
        }
        n++;
    }
    fclose(f);
    return n;
}

static void test_dequant(const golden *g, int n)
{
    for (int i = 0; i < n; i++) {
        float *got = malloc((size_t)g[i].n * sizeof(float));
        hyla_ggml_to_f32(g[i].type, got, g[i].bytes, g[i].n);
        int64_t bad = 0;
        for (int64_t j = 0; j < g[i].n; j++)
            bad += memcmp(&got[j], &g[i].values[j], 4) != 0;
        CHECK(bad == 0, "%s: %lld of %lld values differ from the gguf package's dequantization",
              hyla_ggml_type_name(g[i].type), (long long)bad, (long long)g[i].n);
        free(got);
    }
}

/* ---- products --------------------------------------------------------------------------------- */

/* Rows of K values cut from a golden type's blocks (cycled), as a qmat; row r's logical values in
 * dense[r * K ..] (col_map applied). */
static void make_qmat(hyla_qmat *W, const golden *g, int64_t rows, int64_t K, int permute, float *dense)
{
    size_t row_bytes = hyla_ggml_bytes(g->type, (size_t)K), total = hyla_ggml_bytes(g->type, (size_t)g->n);
    W->type = g->type;
    W->rows = rows;
    W->cols = K;
    W->row = malloc((size_t)rows * sizeof *W->row);
    W->row_type = NULL;
    W->col_map = NULL;
    int64_t rows_in_golden = (int64_t)(total / row_bytes);
    for (int64_t r = 0; r < rows; r++)
        W->row[r] = g->bytes + (size_t)(r % rows_in_golden) * row_bytes;
    if (permute) { /* blocks of 32 columns reversed, as a value-head reorder does */
        W->col_map = malloc((size_t)K * sizeof *W->col_map);
        for (int64_t j = 0; j < K; j++)
            W->col_map[j] = (int32_t)((K / 32 - 1 - j / 32) * 32 + j % 32);
    }
    for (int64_t r = 0; r < rows; r++)
        hyla_qmat_row(W, r, dense + r * K);
}

static int is_kquant(hyla_ggml_type t)
{
    return t == HYLA_GGML_Q2_K || t == HYLA_GGML_Q3_K || t == HYLA_GGML_Q4_K || t == HYLA_GGML_Q5_K ||
           t == HYLA_GGML_Q6_K;
}

/* Types whose int8 products take activations rounded per 32 (llama.cpp's Q8_0), and those that take them per
 * 256 (Q8_K): the K-quants and IQ4_XS. */
static int q8_0_acts(hyla_ggml_type t) { return t == HYLA_GGML_Q8_0 || t == HYLA_GGML_Q4_0 || t == HYLA_GGML_IQ4_NL; }
static int q8_k_decode(hyla_ggml_type t) { return is_kquant(t) || t == HYLA_GGML_IQ4_XS; }

static int all_q8_k_rows(const hyla_qmat *W)
{
    for (int64_t r = 0; r < W->rows; r++)
        if (!q8_k_decode((hyla_ggml_type)W->row_type[r]))
            return 0;
    return 1;
}

static void check_product(const hyla_qmat *W, const float *dense, int64_t n, int64_t K, int64_t rows,
                          const char *what)
{
    float *x = malloc((size_t)(n * K) * sizeof *x), *y = malloc((size_t)(n * rows) * sizeof *y);
    float *scratch = malloc((size_t)hyla_linear_q_scratch_floats(n, K) * sizeof *scratch);
    for (int64_t i = 0; i < n * K; i++)
        x[i] = (float)sin(0.37 * (double)i + 1.0) + 0.25f; /* a nonzero mean, so that the levels' offsets
                                                             * (Q3_K, Q6_K, IQ4_XS) and the mins count */
    int64_t row0 = rows > 4 ? 2 : 0, out = rows - row0;
    hyla_linear_q(y, x, W, row0, n, K, out, scratch);
    /* the K-quants' and Q8_0's / Q4_0's / IQ4_NL's products (decode kernels and the prefill GEMM) round x
     * to int8 first, as llama.cpp: per 256 (Q8_K), per 32 for the 32-value block types (quant.h) */
    int q8_0_decode = !W->row_type && q8_0_acts(W->type) && n <= HYLA_QUANT_SKINNY_M;
    int int8 = hyla_quant_int8_activations && K % (q8_0_decode ? 64 : 256) == 0 &&
               (W->row_type ? n <= HYLA_QUANT_SKINNY_M && all_q8_k_rows(W) /* mixed: the decode kernels per row */
                            : q8_k_decode(W->type) || q8_0_acts(W->type));
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < out; o++) {
            double ref = 0, mag = 0, rounding = 0;
            for (int64_t k = 0; k < K; k++) {
                double w = dense[(row0 + o) * K + k];
                ref += (double)x[i * K + k] * w;
                mag += fabs((double)x[i * K + k] * w);
            }
            /* |x - d q| <= d / 2, d = max |x| / 127 per block of 256 (Q8_K, d in fp32); the Q8_0 GEMM's
             * blocks of 32 keep d as f16 (llama.cpp's): |x - d' q| <= d / 2 + 127 |d - d'| <=
             * d (1/2 + 127 * 2^-11) */
            int64_t xb = q8_0_acts(W->type) && !W->row_type ? 32 : 256;
            double per = xb == 32 ? 0.5 + 127.0 * 0x1p-11 : 0.5;
            for (int64_t b = 0; int8 && b < K / xb; b++) {
                double amax = 0, wsum = 0;
                for (int64_t k = xb * b; k < xb * b + xb; k++) {
                    amax = fmax(amax, fabs((double)x[i * K + k]));
                    wsum += fabs((double)dense[(row0 + o) * K + k]);
                }
                rounding += amax / 127.0 * per * wsum * (1 + 0x1p-20); /* d itself rounded to fp32 */
            }
            /* fp32 accumulation of K products (the dequantized weights formed with at most one extra
             * rounding): a K-term sum in any order is within (K + 2) u sum|x w| of the exact one,
             * u = 2^-24; with int8 activations, plus the rounding of x, sum_b d_b / 2 sum |w| (the
             * integer products and scales are exact) */
            double err = fabs(y[i * out + o] - ref);
            double bound = (double)(K + 2) * 0x1p-24 * (mag + rounding) + rounding + 1e-30;
            worst = err / bound > worst ? err / bound : worst;
        }
    CHECK(worst <= 1.0, "%s %s n=%lld%s: error %.3g of the bound", hyla_ggml_type_name(W->type), what, (long long)n,
          int8 ? " (int8 activations)" : "", worst);
    free(x);
    free(y);
    free(scratch);
}

/* The decode kernels do the same operations for a row whatever the row count, so a batched decode
 * step gives each sequence what it gets alone: y of 8 rows == 8 one-row products, bit for bit. */
static void check_rows_independent(const hyla_qmat *W, int64_t K, int64_t rows)
{
    enum { N = HYLA_QUANT_SKINNY_M };
    float *x = malloc((size_t)(N * K) * sizeof *x), *y = malloc((size_t)(N * rows) * sizeof *y);
    float *y1 = malloc((size_t)rows * sizeof *y1);
    float *scratch = malloc((size_t)hyla_linear_q_scratch_floats(N, K) * sizeof *scratch);
    for (int64_t i = 0; i < N * K; i++)
        x[i] = (float)cos(0.23 * (double)i);
    hyla_linear_q(y, x, W, 0, N, K, rows, scratch);
    int64_t bad = 0;
    for (int64_t i = 0; i < N; i++) {
        hyla_linear_q(y1, x + i * K, W, 0, 1, K, rows, scratch);
        bad += memcmp(y1, y + i * rows, (size_t)rows * sizeof *y1) != 0;
    }
    CHECK(bad == 0, "%s: %lld of %d rows of an %d-row product differ from the same row alone",
          hyla_ggml_type_name(W->type), (long long)bad, N, N);
    free(x), free(y), free(y1), free(scratch);
}

/* A set of items on one matrix (a decode step's routed experts, stacked rows) in one call ==
 * each item alone through hyla_linear_q, bit for bit: the same kernels, one parallel loop. (The
 * golden blocks make equal rows in a single-type matrix; the mixed one tells rows apart.) */
static void check_items(const hyla_qmat *W, int64_t K, int64_t rows)
{
    enum { ITEMS = 3, OUT = 4 };
    static const int64_t ns[ITEMS] = {1, 3, 2}, row0s[ITEMS] = {4, 0, 8};
    float *x = malloc((size_t)(8 * K) * sizeof *x), *y = malloc((size_t)(8 * OUT) * sizeof *y);
    float *y1 = malloc((size_t)(8 * OUT) * sizeof *y1);
    float *scratch = malloc((size_t)(hyla_linear_q_items_scratch_floats(6, ITEMS, K) + hyla_linear_q_scratch_floats(3, K)) *
                            sizeof *scratch);
    for (int64_t i = 0; i < 8 * K; i++)
        x[i] = (float)sin(0.11 * (double)i + 0.5);
    hyla_qitem items[ITEMS];
    int64_t off = 0;
    for (int j = 0; j < ITEMS; j++, off += ns[j - 1])
        items[j] = (hyla_qitem){y + off * OUT, x + off * K, ns[j], row0s[j]};
    CHECK(rows >= 12, "check_items needs 12 rows");
    hyla_linear_q_items(W, items, ITEMS, K, OUT, scratch);
    int bad = 0;
    for (int j = 0; j < ITEMS; j++) {
        hyla_linear_q(y1, items[j].x, W, items[j].row0, items[j].n, K, OUT, scratch);
        bad += memcmp(y1, items[j].y, (size_t)(items[j].n * OUT) * sizeof *y1) != 0;
    }
    CHECK(bad == 0, "%s: %d of %d items of a set differ from the same product alone", hyla_ggml_type_name(W->type), bad,
          ITEMS);
    free(x), free(y), free(y1), free(scratch);
}

static void test_products(const golden *g, int ng)
{
    /* Q8_0 / Q4_0 / IQ4_NL twice: 256 (their prefill GEMM's int8 path) and 320, an odd count of pairs of
     * blocks (their decode kernels' two accumulators take the last pair alone; the GEMM falls back to the
     * sgemm) */
    for (int i = 0, again = 0; i < ng; i += !again) {
        int64_t bv = hyla_ggml_block_values(g[i].type);
        int64_t K = bv == 1 ? 64 : bv == 32 ? 256 : 512; /* whole 256-blocks (the int8 paths), two per K-quant row */
        again = !again && q8_0_acts(g[i].type);
        K = q8_0_acts(g[i].type) && !again ? 320 : K;
        int64_t rows = 24;
        float *dense = malloc((size_t)(rows * K) * sizeof *dense);
        for (int permute = 0; permute < 2; permute++) {
            hyla_qmat W;
            make_qmat(&W, &g[i], rows, K, permute, dense);
            static const int64_t ns[] = {1, 3, 8, 9, 20};
            for (int int8 = 0; int8 < 2; int8++) { /* both activation modes of the decode path */
                hyla_quant_int8_activations = int8;
                for (size_t k = 0; k < sizeof ns / sizeof *ns; k++)
                    check_product(&W, dense, ns[k], K, rows, permute ? "permuted columns" : "plain");
                check_rows_independent(&W, K, rows);
                check_items(&W, K, rows);
            }
            free(W.row);
            free(W.col_map);
        }
        free(dense);
    }
    /* rows of two types in one matrix (gate and up of a mixed file): Q8_0 and Q4_0 rows of 128; and
     * Q6_K and Q4_K / Q5_K rows of 512 (a Q4_K_M file's GDN input projection: the Q4_K / Q5_K kernels
     * read x in their own block order, the Q6_K kernel in x's) */
    const golden *q8 = NULL, *q4 = NULL, *q6k = NULL, *q4k = NULL, *q5k = NULL, *q3k = NULL, *q2k = NULL;
    for (int i = 0; i < ng; i++) {
        q8 = g[i].type == HYLA_GGML_Q8_0 ? &g[i] : q8;
        q4 = g[i].type == HYLA_GGML_Q4_0 ? &g[i] : q4;
        q6k = g[i].type == HYLA_GGML_Q6_K ? &g[i] : q6k;
        q4k = g[i].type == HYLA_GGML_Q4_K ? &g[i] : q4k;
        q5k = g[i].type == HYLA_GGML_Q5_K ? &g[i] : q5k;
        q3k = g[i].type == HYLA_GGML_Q3_K ? &g[i] : q3k;
        q2k = g[i].type == HYLA_GGML_Q2_K ? &g[i] : q2k;
    }
    int all_types = q8 && q4 && q6k && q4k && q5k && q3k && q2k;
    CHECK(all_types, "golden file lacks Q8_0 / Q4_0 / Q6_K / Q4_K / Q5_K / Q3_K / Q2_K");
    /* mixes 2 and 3: runs of one type, as a Q4_K_M file's merged projections are laid out -- Q6_K rows
     * 0-4, Q4_K 5-12, Q5_K 13-19 (a Q3_K_M file's GDN input projection: Q4_K qkv rows, Q3_K z rows):
     * with check_product's first row 2, the blocks of 4 rows 6-9 and 14-17 take the 4-row kernels,
     * 2-5 and 10-13 (two types) the one-row ones */
    const golden *mixes[][3] = {{q8, q4, NULL}, {q6k, q4k, q5k}, {q6k, q4k, q5k}, {q3k, q4k, q2k}};
    for (int mix = 0; mix < 4 && all_types; mix++) {
        int64_t K = mix ? 512 : 160, rows = mix >= 2 ? 20 : 12; /* Q8_0 / Q4_0: an odd count of blocks of
                                                   * 32 (the Q8_0 kernel's two chains take the last one alone) */
        float *dense = malloc((size_t)(rows * K) * sizeof *dense);
        hyla_qmat W = {.type = mixes[mix][0]->type, .rows = rows, .cols = K};
        W.row = malloc((size_t)rows * sizeof *W.row);
        W.row_type = malloc((size_t)rows);
        for (int64_t r = 0; r < rows; r++) {
            const golden *s = mix >= 2 ? mixes[mix][(r >= 5) + (r >= 13)]
                                       : mixes[mix][r % 2 ? 1 + (mix && r % 4 == 3) : 0];
            W.row_type[r] = (unsigned char)s->type;
            size_t row_bytes = hyla_ggml_bytes(s->type, (size_t)K), have = hyla_ggml_bytes(s->type, (size_t)s->n) / row_bytes;
            W.row[r] = s->bytes + (size_t)(r / 2) % have * row_bytes;
            hyla_qmat_row(&W, r, dense + r * K);
        }
        for (int64_t n = 1; n <= 16; n += mix ? 1 : 15)
            check_product(&W, dense, n, K, rows, "mixed row types");
        if (mix) {
            check_rows_independent(&W, K, rows);
            check_items(&W, K, rows);
        }
        free(W.row);
        free(W.row_type);
        free(dense);
    }
}

/* Products of one x with several matrices in one call (hyla_linear_q_fanout: a layer's input
 * projections) == each matrix alone through hyla_linear_q, bit for bit, for both activation modes,
 * one and three rows, one and two threads. Set 0 mixes the ways x is prepared (Q8_K with and
 * without the Q4_K order, a permuted-column matrix that needs its own, Q8_0's per-32 rounding);
 * set 1 shares one preparation whose Q4_K order a later matrix asks for. */
static void test_fanout(const golden *g, int ng)
{
    enum { K = 512, ROWS = 96 }; /* one row against ~270 rows of 512: above HYLA_PAR_MIN_WORK, so 2 threads split */
    const golden *q8 = NULL, *q6k = NULL, *q4k = NULL;
    for (int i = 0; i < ng; i++) {
        q8 = g[i].type == HYLA_GGML_Q8_0 ? &g[i] : q8;
        q6k = g[i].type == HYLA_GGML_Q6_K ? &g[i] : q6k;
        q4k = g[i].type == HYLA_GGML_Q4_K ? &g[i] : q4k;
    }
    CHECK(q8 && q6k && q4k, "golden file lacks Q8_0 / Q6_K / Q4_K");
    if (!(q8 && q6k && q4k))
        return;
    hyla_qmat W[4];
    float *dense = malloc((size_t)(ROWS * K) * sizeof *dense);
    const golden *types[4] = {q6k, q4k, q4k, q8};
    for (int j = 0; j < 4; j++)
        make_qmat(&W[j], types[j], ROWS, K, j == 2, dense);
    static const int64_t row0s[4] = {2, 0, 5, 1}, outs[4] = {90, 96, 53, 29};
    static const int sets[2][4] = {{0, 1, 2, 3}, {0, 1, 1, -1}};
    float *x = malloc((size_t)(3 * K) * sizeof *x), *y[4], *y1 = malloc((size_t)(3 * ROWS) * sizeof *y1);
    int64_t scratch_floats = hyla_linear_q_fanout_scratch_floats(3, 4, K) + hyla_linear_q_scratch_floats(3, K);
    float *scratch = malloc((size_t)scratch_floats * sizeof *scratch);
    for (int64_t i = 0; i < 3 * K; i++)
        x[i] = (float)sin(0.19 * (double)i + 0.3);
    for (int j = 0; j < 4; j++)
        y[j] = malloc((size_t)(3 * ROWS) * sizeof *y[j]);
    int bad = 0, cases = 0, max_threads = omp_get_max_threads(), int8_default = hyla_quant_int8_activations;
    for (int set = 0; set < 2; set++)
        for (int int8 = 0; int8 < 2; int8++)
            for (int64_t n = 1; n <= 3; n += 2)
                for (int threads = 1; threads <= 2; threads++) {
                    hyla_quant_int8_activations = int8;
                    omp_set_num_threads(threads);
                    hyla_qtarget t[4];
                    int count = 0;
                    for (int j = 0; j < 4 && sets[set][j] >= 0; j++, count++) {
                        int m = sets[set][j];
                        t[j] = (hyla_qtarget){&W[m], y[j], row0s[m] + (set && j == 2), outs[m] - (set && j == 2)};
                    }
                    for (int j = 0; j < count; j++) /* rows a split skipped would stay NaN */
                        for (int64_t i = 0; i < n * t[j].out; i++)
                            t[j].y[i] = NAN;
                    hyla_linear_q_fanout(t, count, x, n, K, scratch);
                    for (int j = 0; j < count; j++, cases++) {
                        hyla_linear_q(y1, x, t[j].W, t[j].row0, n, K, t[j].out, scratch);
                        bad += memcmp(y1, t[j].y, (size_t)(n * t[j].out) * sizeof *y1) != 0;
                    }
                }
    omp_set_num_threads(max_threads);
    hyla_quant_int8_activations = int8_default;
    CHECK(bad == 0, "fanout: %d of %d products differ from the same product alone", bad, cases);
    for (int j = 0; j < 4; j++) {
        free(W[j].row), free(W[j].col_map), free(y[j]);
    }
    free(dense), free(x), free(y1), free(scratch);
}

/* ---- reader: files built byte by byte ----------------------------------------------------------- */

typedef struct {
    unsigned char b[8192];
    size_t n;
} buf;

static void put(buf *o, const void *p, size_t n)
{
    memcpy(o->b + o->n, p, n);
    o->n += n;
}
static void u32(buf *o, uint32_t v) { put(o, &v, 4); }
static void u64(buf *o, uint64_t v) { put(o, &v, 8); }
static void str(buf *o, const char *s)
{
    u64(o, strlen(s));
    put(o, s, strlen(s));
}

/* What a test file may vary. */
typedef struct {
    uint32_t version;
    uint64_t n_tensors_claimed, n_kv_claimed; /* 0: the true counts */
    uint64_t str_len_lie;                     /* nonzero: the architecture string claims this length */
    uint64_t array_count_lie;                 /* nonzero: the token array claims this count */
    uint32_t kv_type_lie;                     /* nonzero: the architecture's value type */
    uint32_t elem_type;                       /* the array's element type (default I32) */
    int duplicate_key, duplicate_tensor;
    uint32_t tensor_type;                     /* of the second tensor (default Q8_0) */
    uint64_t dim0, dim1;                      /* of the second tensor (default 64 x 2) */
    uint32_t n_dims;                          /* of the second tensor (default 2; UINT32_MAX: 0) */
    uint64_t offset2;                         /* of the second tensor (default 64) */
    uint32_t alignment;                       /* written as general.alignment when nonzero */
    size_t data_bytes;                        /* default: exactly what the tensors need */
} spec;

static void build(buf *o, const spec *s)
{
    memset(o, 0, sizeof *o);
    put(o, "GGUF", 4);
    u32(o, s->version ? s->version : 3);
    uint64_t n_t = 2, n_kv = 2 + (s->alignment != 0) + (s->duplicate_key != 0);
    u64(o, s->n_tensors_claimed ? s->n_tensors_claimed : n_t);
    u64(o, s->n_kv_claimed ? s->n_kv_claimed : n_kv);
    str(o, "general.architecture");
    u32(o, s->kv_type_lie ? s->kv_type_lie : HYLA_GGUF_STRING);
    if (s->str_len_lie) {
        u64(o, s->str_len_lie);
        put(o, "qwen35", 6);
    } else
        str(o, "qwen35");
    str(o, "tok.ids");
    u32(o, HYLA_GGUF_ARRAY);
    u32(o, s->elem_type ? s->elem_type : HYLA_GGUF_I32);
    u64(o, s->array_count_lie ? s->array_count_lie : 3);
    for (int32_t i = 0; i < 3; i++)
        put(o, &(int32_t){7 * i - 1}, 4);
    if (s->alignment) {
        str(o, "general.alignment");
        u32(o, HYLA_GGUF_U32);
        u32(o, s->alignment);
    }
    if (s->duplicate_key) {
        str(o, "tok.ids");
        u32(o, HYLA_GGUF_U32);
        u32(o, 1);
    }
    /* tensor 0: F32 [16] at 0 (64 bytes); tensor 1: Q8_0 [64, 2] at 64 (2 x 2 blocks of 34 = 136) */
    str(o, "a.weight");
    u32(o, 1);
    u64(o, 16);
    u32(o, HYLA_GGML_F32);
    u64(o, 0);
    str(o, s->duplicate_tensor ? "a.weight" : "b.weight");
    uint32_t nd = s->n_dims == UINT32_MAX ? 0 : s->n_dims ? s->n_dims : 2;
    u32(o, nd);
    u64(o, s->dim0 ? s->dim0 : 64);
    if (nd >= 2)
        u64(o, s->dim1 ? s->dim1 : 2);
    for (uint32_t d = 2; d < nd && d < 8; d++)
        u64(o, 1);
    u32(o, s->tensor_type ? s->tensor_type : HYLA_GGML_Q8_0);
    u64(o, s->offset2 ? s->offset2 : 64);
    uint32_t align = s->alignment ? s->alignment : 32;
    while (o->n % align)
        o->b[o->n++] = 0;
    size_t data = s->data_bytes ? s->data_bytes : 64 + 136;
    for (size_t i = 0; i < data && o->n < sizeof o->b; i++)
        o->b[o->n++] = (unsigned char)(i * 13 + 1);
}

static void expect_error(const spec *s, const char *needle, const char *what)
{
    buf o;
    build(&o, s);
    hyla_gguf_file *f = NULL;
    int st = hyla_gguf_parse(&f, o.b, o.n, "t.gguf");
    CHECK(st != HYLA_OK, "%s: parsed", what);
    CHECK(st == HYLA_OK || strstr(hyla_error_message(), needle), "%s: error '%s' does not mention '%s'", what,
          hyla_error_message(), needle);
    CHECK(st == HYLA_OK || strstr(hyla_error_message(), "t.gguf"), "%s: error does not name the file", what);
    hyla_gguf_close(f);
}

static void test_reader(void)
{
    spec good = {0};
    buf o;
    build(&o, &good);
    hyla_gguf_file *f;
    int st = hyla_gguf_parse(&f, o.b, o.n, "t.gguf");
    CHECK(st == HYLA_OK, "good file: %s", hyla_error_message());
    if (st == HYLA_OK) {
        const char *s;
        size_t n;
        CHECK(hyla_gguf_get_str(f, "general.architecture", 1, &s, &n) == HYLA_OK && n == 6 && !memcmp(s, "qwen35", 6),
              "architecture");
        const hyla_gguf_kv *kv = hyla_gguf_find_kv(f, "tok.ids");
        CHECK(kv && kv->count == 3 && hyla_gguf_arr_int(kv, 2) == 13 && hyla_gguf_arr_int(kv, 0) == -1, "array");
        const hyla_gguf_tensor *t = hyla_gguf_find_tensor(f, "b.weight");
        CHECK(t && t->type == HYLA_GGML_Q8_0 && t->ne[0] == 64 && t->ne[1] == 2 && t->nbytes == 136 &&
                  t->data == o.b + (hyla_gguf_find_tensor(f, "a.weight")->data - o.b) + 64,
              "tensor b");
        int64_t v;
        CHECK(hyla_gguf_get_int(f, "missing.key", 1, &v) != HYLA_OK && strstr(hyla_error_message(), "missing.key"),
              "missing key named");
        CHECK(hyla_gguf_get_int(f, "general.architecture", 1, &v) != HYLA_OK, "string read as an integer");
        hyla_gguf_close(f);
    }
    /* every truncation fails cleanly (the data block's end included) */
    for (size_t len = 0; len < o.n; len++) {
        st = hyla_gguf_parse(&f, o.b, len, "t.gguf");
        CHECK(st != HYLA_OK, "truncated to %zu of %zu bytes: parsed", len, o.n);
        hyla_gguf_close(st == HYLA_OK ? f : NULL);
    }
    struct { spec s; const char *needle, *what; } bad[] = {
        {{.version = 1}, "version 1", "GGUF v1"},
        {{.version = 4}, "version 4", "GGUF v4"},
        {{.n_tensors_claimed = (uint64_t)1 << 60}, "cannot fit", "huge tensor count"},
        {{.n_kv_claimed = (uint64_t)1 << 62}, "cannot fit", "huge key-value count"},
        {{.n_kv_claimed = 9}, "key", "more key-values than written"},
        {{.str_len_lie = (uint64_t)1 << 40}, "truncated", "string longer than the file"},
        {{.str_len_lie = UINT64_MAX}, "truncated", "string length 2^64-1"},
        {{.array_count_lie = (uint64_t)1 << 61}, "does not fit", "array count overflowing its byte size"},
        {{.array_count_lie = 4000}, "does not fit", "array longer than the file"},
        {{.elem_type = HYLA_GGUF_ARRAY}, "arrays of value type 9", "array of arrays"},
        {{.elem_type = 77}, "value type 77", "array of an unknown type"},
        {{.kv_type_lie = 13}, "unknown value type 13", "unknown value type"},
        {{.duplicate_key = 1}, "tok.ids appears twice", "duplicate key"},
        {{.duplicate_tensor = 1}, "a.weight appears twice", "duplicate tensor"},
        {{.tensor_type = 15}, "ggml type 15", "an unsupported ggml type (Q8_K)"},
        {{.tensor_type = 99}, "ggml type 99", "an unknown ggml type"},
        {{.dim0 = 48}, "not whole Q8_0 blocks", "a row that is not whole blocks"},
        {{.dim1 = (uint64_t)1 << 62}, "dimension 1", "dimensions whose product overflows"},
        {{.n_dims = 5}, "5 dimensions", "five dimensions"},
        {{.n_dims = UINT32_MAX}, "0 dimensions", "zero dimensions"},
        {{.offset2 = 72}, "not a multiple of the alignment", "misaligned offset"},
        {{.offset2 = 1 << 20}, "past the end", "offset past the end"},
        {{.offset2 = 32}, "overlap", "overlapping tensors"},
        {{.data_bytes = 150}, "past the end", "data block shorter than the tensors"},
        {{.alignment = 48}, "general.alignment is 48", "alignment not a power of two"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_error(&bad[i].s, bad[i].needle, bad[i].what);
    /* a larger power-of-two alignment is honoured */
    spec al = {.alignment = 64, .offset2 = 64};
    build(&o, &al);
    st = hyla_gguf_parse(&f, o.b, o.n, "t.gguf");
    CHECK(st == HYLA_OK, "alignment 64: %s", hyla_error_message());
    if (st == HYLA_OK) {
        CHECK((hyla_gguf_find_tensor(f, "a.weight")->data - o.b) % 64 == 0, "data block aligned to 64");
        hyla_gguf_close(f);
    }
}


/* ---- activation rounding: AVX-512 == scalar ------------------------------------------------- */

static void quantize_both(int q8_0, const float *x, int64_t n, int64_t K, float *s0, float *s1, hyla_qx *a, hyla_qx *b)
{
    for (int scalar = 0; scalar < 2; scalar++) {
        hyla_quantize_x_scalar = scalar;
        if (q8_0)
            hyla_quantize_x_q8_0(scalar ? b : a, x, n, K, scalar ? s1 : s0);
        else
            hyla_quantize_x(scalar ? b : a, x, n, K, scalar ? s1 : s0);
    }
    hyla_quantize_x_scalar = 0;
}

static void test_quantize_x(void)
{
    const int64_t n = 5, K = 1024;
    float *x = malloc((size_t)(n * K) * sizeof *x);
    uint32_t st = 12345;
    for (int64_t i = 0; i < n * K; i++) {
        st = st * 1664525u + 1013904223u;
        x[i] = ((float)(st >> 8) / 16777216.0f - 0.5f) * (i / K == 3 ? 1e-30f : i / K == 4 ? 3e30f : 4.0f);
    }
    for (int64_t k = 0; k < 256; k++) /* row 0's first block: zero; its second: ties of both signs at the max */
        x[k] = 0.0f;
    x[256 + 17] = 9.0f, x[256 + 20] = -9.0f, x[256 + 40] = -9.0f, x[256 + 200] = 9.0f;
    x[K + 512 + 3] = -7.5f, x[K + 512 + 99] = 7.5f; /* row 1: the negative first */
    for (int64_t k = 0; k < 64; k++) /* row 2: values exactly halfway between levels */
        x[2 * K + k] = (float)(k - 32) + 0.5f;
    float *s0 = malloc((size_t)hyla_qx_floats(n, K) * sizeof *s0), *s1 = malloc((size_t)hyla_qx_floats(n, K) * sizeof *s1);
    for (int q8_0 = 0; q8_0 < 2; q8_0++) {
        hyla_qx a, b;
        quantize_both(q8_0, x, n, K, s0, s1, &a, &b);
        int64_t nd = n * (K / a.block);
        CHECK(a.block == b.block && !memcmp(a.q, b.q, (size_t)(n * K)) && !memcmp(a.d, b.d, (size_t)nd * sizeof *a.d) &&
                  !memcmp(a.bsums, b.bsums, (size_t)(n * (K / 16)) * sizeof *a.bsums),
              "activation rounding per %d: AVX-512 and scalar agree bit for bit", a.block);
        if (!q8_0) /* the tie: the first value of largest magnitude sets the sign of d (llama.cpp's rule) */
            CHECK(a.d[1] < 0 && a.q[256 + 17] == -127 && a.q[256 + 20] == 127 && a.d[K / 256 + 2] > 0,
                  "Q8_K ties: d %g, q %d, row 1's d %g", a.d[1], a.q[256 + 20], a.d[K / 256 + 2]);
    }
    free(x), free(s0), free(s1);
}

/* ---- four rows at once == one row at a time ---------------------------------------------------- */

static void test_rows4(void)
{
    const hyla_ggml_type types[3] = {HYLA_GGML_Q4_K, HYLA_GGML_Q5_K, HYLA_GGML_Q6_K};
    const int64_t K = 1024, rows = 6;
    uint32_t st = 777;
    float *x = malloc((size_t)K * sizeof *x), *scratch = malloc((size_t)(hyla_qx_floats(1, K) + K) * sizeof *scratch);
    for (int64_t k = 0; k < K; k++) {
        st = st * 1664525u + 1013904223u;
        x[k] = (float)(st >> 8) / 16777216.0f - 0.5f;
    }
    hyla_qx xq;
    hyla_quantize_x(&xq, x, 1, K, scratch);
    hyla_qx_k4_order(&xq, 1, (int8_t *)(scratch + hyla_qx_floats(1, K)));
    for (int ti = 0; ti < 3; ti++) {
        hyla_ggml_type t = types[ti];
        hyla_qdot_i8_rows4_fn four = hyla_qdot_i8_rows4_avx512(t);
        hyla_qdot_i8_fn one = hyla_qdot_i8_avx512(t, 1);
        if (!four || !one) {
            printf("  (no AVX-512 VNNI: the four-row kernel is not used)\n");
            break;
        }
        size_t rb = hyla_ggml_bytes(t, (size_t)K);
        unsigned char *w = malloc(rb * (size_t)rows);
        for (size_t i = 0; i < rb * (size_t)rows; i++) {
            st = st * 1664525u + 1013904223u;
            w[i] = (unsigned char)(st >> 24);
        }
        for (int64_t b = 0; b < rows * (K / 256); b++) { /* finite d and dmin (f16 0.0134, 0.0023); Q6_K's d */
            unsigned char *blk = w + b * (int64_t)hyla_ggml_bytes(t, 256);
            if (t == HYLA_GGML_Q6_K)
                blk[208] = 0xDC, blk[209] = 0x22;
            else
                blk[0] = 0xDC, blk[1] = 0x22, blk[2] = 0xB6, blk[3] = 0x18;
        }
        const unsigned char *rp[6];
        for (int r = 0; r < rows; r++)
            rp[r] = w + (size_t)r * rb;
        float y4[4], y1[4];
        int same = 1;
        for (int r0 = 0; r0 + 4 <= rows; r0++) { /* every window of 4 rows */
            four(y4, &xq, rp + r0);
            for (int r = 0; r < 4; r++) {
                one(&y1[r], 1, &xq, rp[r0 + r]);
                same &= !memcmp(&y4[r], &y1[r], sizeof(float)) && isfinite(y1[r]);
            }
        }
        CHECK(same, "%s: four rows at once == one at a time, bit for bit", hyla_ggml_type_name(t));
        free(w);
    }
    free(x), free(scratch);
}

static void test_quantize_threads(void)
{
    const int64_t n = 300 * 1024; /* 1,200 Q4_K blocks: four pieces and a partial one */
    float *x = malloc((size_t)n * sizeof(float));
    uint32_t st = 12345;
    for (int64_t i = 0; i < n; i++) { /* values of several magnitudes, some blocks all zero */
        st = st * 1664525u + 1013904223u;
        x[i] = (i / 4096) % 7 == 3 ? 0.0f : ((float)(st >> 8) / 16777216.0f - 0.5f) * (float)(1 + (i / 2048) % 5);
    }
    const hyla_ggml_type types[] = {HYLA_GGML_Q8_0, HYLA_GGML_Q6_K, HYLA_GGML_Q5_K, HYLA_GGML_Q4_K};
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        hyla_ggml_type t = types[k];
        size_t bytes = hyla_ggml_bytes(t, (size_t)n), bv = (size_t)hyla_ggml_block_values(t);
        unsigned char *one = malloc(bytes), *two = malloc(bytes), *alone = malloc(bytes);
        int threads = omp_get_max_threads();
        omp_set_num_threads(1);
        hyla_ggml_from_f32(t, one, x, (size_t)n);
        omp_set_num_threads(2);
        hyla_ggml_from_f32(t, two, x, (size_t)n);
        omp_set_num_threads(threads);
        size_t piece = 256 * bv; /* values of one piece, quantized on their own */
        for (size_t v0 = 0; v0 < (size_t)n; v0 += piece) {
            size_t len = (size_t)n - v0 < piece ? (size_t)n - v0 : piece;
            hyla_ggml_from_f32(t, alone + hyla_ggml_bytes(t, v0), x + v0, len);
        }
        CHECK(!memcmp(one, two, bytes), "%s: 1 and 2 threads quantize differently", hyla_ggml_type_name(t));
        CHECK(!memcmp(one, alone, bytes), "%s: the whole differs from its pieces quantized alone",
              hyla_ggml_type_name(t));
        free(one), free(two), free(alone);
    }
    free(x);
}

int main(void)
{
    golden g[32];
    int n = read_golden(g, 32, "tests/data/ggml_dequant_golden.bin");
    CHECK(n >= 11, "golden file has %d types", n);
    test_dequant(g, n);
    test_products(g, n);
    test_fanout(g, n);
    test_quantize_x();
    test_rows4();
    test_quantize_threads();
    test_reader();
    for (int i = 0; i < n; i++) {
        free(g[i].bytes);
        free(g[i].values);
    }
    if (failures)
        printf("%d failure(s)\n", failures);
    else
        printf("test_gguf: all passed\n");
    return failures != 0;
}
