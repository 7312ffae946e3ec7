/* Products with weights in ggml block formats read in place (quant.h; the formats and their
 * dequantization: core/quant_blocks.c).
 *
 * With hyla_quant_int8_activations (the default) and AVX-512 VNNI, the activations are rounded to 8
 * bits per block first, as llama.cpp rounds them: per 32 (its Q8_0) for Q8_0 / Q4_0 / IQ4_NL weights,
 * per 256 (Q8_K) for the K-quants and IQ4_XS; integer products, the scales in fp32 once per block.
 * Otherwise (other types, no VNNI, or hyla_quant_int8_activations = 0) the activations stay fp32 and a
 * weight block is dequantized exactly as ggml's dequantize_row_* does.
 *   n <= HYLA_QUANT_SKINNY_M (decode): every product's stored bytes are shared among the threads
 *     (skinny_run), each row read once and dotted with the n activation rows by the AVX-512 kernels of
 *     core/quant_avx512*.c (blocks widened in registers), the other types by pieces of up to 256
 *     values dequantized on the stack.
 *   larger n (prefill): the int8 GEMM (core/quant_gemm.c) where it applies, else blocks of QROWS
 *     weight rows dequantized into scratch (split over the threads) and multiplied by the sgemm, so
 *     the cost over the sgemm is one pass over W. */
#include "core/quant.h"

#include <immintrin.h>
#include <omp.h>
#include <stdatomic.h>

#include "core/error.h"
#include "core/gemm.h"
#include "core/parallel.h"
#include "core/quant_kernels.h"

#define QROWS 128 /* weight rows dequantized at once for the sgemm path */
#define PIECE 256 /* values dequantized at once on the streaming path (one K-quant super-block) */

static inline hyla_ggml_type row_type(const hyla_qmat *W, int64_t r)
{
    return W->row_type ? (hyla_ggml_type)W->row_type[r] : W->type;
}

size_t hyla_qmat_bytes(const hyla_qmat *W)
{
    size_t bytes = 0;
    for (int64_t r = 0; r < W->rows; r++)
        bytes += hyla_ggml_bytes(row_type(W, r), (size_t)W->cols);
    return bytes;
}

void hyla_qmat_row(const hyla_qmat *W, int64_t r, float *dst)
{
    hyla_ggml_type t = row_type(W, r);
    if (!W->col_map) {
        hyla_ggml_to_f32(t, dst, W->row[r], W->cols);
        return;
    }
    float piece[PIECE];
    int64_t step = hyla_ggml_block_values(t) > PIECE ? hyla_ggml_block_values(t) : PIECE;
    for (int64_t k0 = 0; k0 < W->cols; k0 += step) {
        int64_t len = W->cols - k0 < step ? W->cols - k0 : step;
        hyla_ggml_to_f32(t, piece, W->row[r] + hyla_ggml_bytes(t, (size_t)k0), len);
        for (int64_t j = 0; j < len; j++)
            dst[W->col_map[k0 + j]] = piece[j];
    }
}

/* ---- products ------------------------------------------------------------------------------------ */

int hyla_quant_int8_activations = 1;

/* Floats of scratch skinny_prepare takes for n rows of in. */
static int64_t skinny_floats(int64_t n, int64_t in)
{
    int64_t k4 = hyla_qx_k4_bytes(n, in), q8_0 = hyla_qx_q8_0_lanes_bytes(n, in);
    return n * in + hyla_qx_floats(n, in) + ((k4 > q8_0 ? k4 : q8_0) + 3) / 4;
}

int64_t hyla_linear_q_scratch_floats(int64_t n, int64_t in)
{
    if (n <= HYLA_QUANT_SKINNY_M) /* x gathered; x rounded to int8; the int8 x in the K-quant order */
        return skinny_floats(n, in);
    /* the larger of the sgemm path's dequantized rows and the int8 GEMM's rounded activations +
     * repacked tile */
    int64_t sgemm = QROWS * in, int8 = hyla_qx_floats(n, in) + hyla_qgemm_scratch_floats(in);
    return n * in + (sgemm > int8 ? sgemm : int8);
}

/* x rows gathered into the stored column order. */
static void gather_row(float *dst /*[in]*/, const float *x /*[in]*/, const int32_t *col_map, int64_t in)
{
    for (int64_t j = 0; j < in; j++)
        dst[j] = x[col_map[j]];
}
static const float *stored_order(const hyla_qmat *W, const float *x, int64_t n, int64_t in, float *dst)
{
    if (!W->col_map)
        return x;
    if (omp_in_parallel() || n * in < HYLA_PAR_MIN_WORK) { /* (no region: even one not taken costs ~0.4 us) */
        for (int64_t i = 0; i < n; i++)
            gather_row(dst + i * in, x + i * in, W->col_map, in);
        return dst;
    }
#pragma omp parallel for schedule(static) HYLA_PAR_IF(n * in)
    for (int64_t i = 0; i < n; i++)
        gather_row(dst + i * in, x + i * in, W->col_map, in);
    return dst;
}



/* The same for any type: pieces of the row dequantized on the stack. */
static void dot_generic(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t n, hyla_ggml_type t,
                        const unsigned char *row, int64_t K)
{
    float piece[PIECE], acc[HYLA_QUANT_SKINNY_M] = {0};
    int64_t step = hyla_ggml_block_values(t) > PIECE ? hyla_ggml_block_values(t) : PIECE;
    for (int64_t k0 = 0; k0 < K; k0 += step) {
        int64_t len = K - k0 < step ? K - k0 : step;
        hyla_ggml_to_f32(t, piece, row + hyla_ggml_bytes(t, (size_t)k0), len);
        for (int64_t i = 0; i < n; i++) {
            const float *xi = x + i * ldx + k0;
            float s = 0;
#pragma omp simd reduction(+ : s)
            for (int64_t j = 0; j < len; j++)
                s += piece[j] * xi[j];
            acc[i] += s;
        }
    }
    for (int64_t i = 0; i < n; i++)
        y[i * ldy] = acc[i];
}

enum { X_FP32 = 0, X_Q8_0 = 1, X_Q8_K = 2 }; /* how a product with W takes its activations */

/* A decode-sized product's activations, prepared once for all the rows that read them: x in the
 * stored column order, rounded to int8 (and put in the Q4_K / Q5_K order) for the types whose
 * products run on VNNI. */
typedef struct {
    const float *x;
    int64_t n;
    hyla_qx xq;
    /* how to make it (skinny_x_fill, inside the product's parallel region): */
    const hyla_qmat *W;
    const float *src; /* [n, in] */
    int64_t in;
    int kind, k4;
    float *scratch;
} skinny_x;

static int skinny_int8(const skinny_x *p) { return p->kind != X_FP32; }

/* Q8_0 / Q4_0 / IQ4_NL rows: activations per 32 as llama.cpp's (the prefill GEMM's); other K-quant rows
 * (and those of a matrix of mixed types, where such rows keep fp32 activations): Q8_K per 256. */
static int skinny_kind(const hyla_qmat *W, int64_t n, int64_t in)
{
    int q8_0 = !W->row_type && hyla_q8_0_activations(W->type);
    if (!hyla_quant_int8_activations || in % (q8_0 ? 64 : 256) != 0 ||
        !(W->row_type || hyla_qdot_i8_avx512(W->type, n)))
        return X_FP32;
    return q8_0 ? X_Q8_0 : X_Q8_K;
}
/* The Q4_K / Q5_K kernels read the activations in their own order (mixed matrices may hold such rows). */
static int skinny_needs_k4(const hyla_qmat *W)
{
    return W->row_type || W->type == HYLA_GGML_Q4_K || W->type == HYLA_GGML_Q5_K;
}

/* What p will hold (its row count and kind), and the recipe skinny_x_fill follows. */
static void skinny_x_init(skinny_x *p, const hyla_qmat *W, int kind, int k4, const float *x, int64_t n, int64_t in,
                          float *scratch)
{
    *p = (skinny_x){.n = n, .W = W, .src = x, .in = in, .kind = kind, .k4 = k4, .scratch = scratch};
}

/* p's activations: in the stored column order, rounded as its kind says. */
static void skinny_x_fill(skinny_x *p)
{
    int64_t n = p->n, in = p->in;
    float *scratch = p->scratch;
    p->x = stored_order(p->W, p->src, n, in, scratch);
    scratch += n * in;
    if (p->kind == X_Q8_0) {
        hyla_quantize_x_q8_0(&p->xq, p->x, n, in, scratch);
        hyla_qx_q8_0_lanes(&p->xq, n, scratch + hyla_qx_floats(n, in));
    } else if (p->kind == X_Q8_K) {
        hyla_quantize_x(&p->xq, p->x, n, in, scratch);
        if (p->k4)
            hyla_qx_k4_order(&p->xq, n, (int8_t *)(scratch + hyla_qx_floats(n, in)));
    }
}

/* One product's share of a parallel loop: output rows row0 .. row0 + out of W against the prepared
 * p, in blocks of 4 rows, with the kernels of W's type looked up once (per row only for a matrix
 * of mixed types); block_bytes (W's stored bytes of a block) splits the loop's work by bytes. */
typedef struct {
    const hyla_qmat *W;
    const skinny_x *p;
    float *y;
    int64_t row0, out, blocks;
    size_t block_bytes;
    hyla_qdot_i8_fn one_i8;
    hyla_qdot_fn one;
    hyla_qdot_i8_rows4_fn four; /* every whole block's kernel when one applies to all (one row, one type) */
} skinny_job;

static skinny_job skinny_job_make(const hyla_qmat *W, const skinny_x *p, float *y, int64_t row0, int64_t out,
                                  int64_t in)
{
    skinny_job j = {.W = W, .p = p, .y = y, .row0 = row0, .out = out, .blocks = (out + 3) / 4};
    /* (a mixed matrix's blocks counted at its first row's type: the split is then approximate) */
    j.block_bytes = 4 * hyla_ggml_bytes(row_type(W, row0), (size_t)in);
    j.one_i8 = skinny_int8(p) ? hyla_qdot_i8_avx512(W->type, p->n) : NULL;
    j.one = j.one_i8 ? NULL : hyla_qdot_avx512(W->type, p->n);
    j.four = p->n == 1 && j.one_i8 && !W->row_type ? hyla_qdot_i8_rows4_avx512(W->type) : NULL;
    return j;
}

/* y[i * ldy] = x_i . (stored row r of W), i < p->n. */
static void skinny_row(const skinny_job *j, int64_t r, float *y, int64_t ldy, int64_t in)
{
    const hyla_qmat *W = j->W;
    const skinny_x *p = j->p;
    const unsigned char *row = W->row[r];
    hyla_ggml_type t = row_type(W, r);
    hyla_qdot_i8_fn dot_i8 = !W->row_type                     ? j->one_i8
                             : skinny_int8(p) && !hyla_q8_0_activations(t) ? hyla_qdot_i8_avx512(t, p->n)
                                                              : NULL;
    hyla_qdot_fn dot = !W->row_type ? j->one : dot_i8 ? NULL : hyla_qdot_avx512(t, p->n);
    if (dot_i8)
        dot_i8(y, ldy, &p->xq, row);
    else if (dot)
        dot(y, ldy, p->x, in, row, in);
    else
        dot_generic(y, ldy, p->x, in, p->n, t, row, in);
}

/* The 4-row kernel for rows r0 .. r0 + 3 of a matrix of mixed types when they share one that has
 * it and the activations were rounded for it (p: one row, int8, in the K-quant order); else NULL. */
static hyla_qdot_i8_rows4_fn mixed_rows4(const hyla_qmat *W, const skinny_x *p, int64_t r0)
{
    unsigned char t = W->row_type[r0];
    if (!skinny_int8(p) || W->row_type[r0 + 1] != t || W->row_type[r0 + 2] != t || W->row_type[r0 + 3] != t)
        return NULL;
    return hyla_qdot_i8_rows4_avx512((hyla_ggml_type)t);
}

/* Block b (output rows 4b .. 4b + 3) of job j. A one-row product whose rows share a type with a
 * 4-row kernel (Q4_K, Q5_K, Q6_K: the same bits as the one-row kernel) takes them together -- in a
 * matrix of mixed types too (a parameter merged from tensors of different types, e.g. gate and up),
 * where it applies to the blocks of one type. */
static void skinny_block(const skinny_job *j, int64_t b, int64_t in)
{
    int64_t o0 = b * 4, o1 = o0 + 4 < j->out ? o0 + 4 : j->out;
    hyla_qdot_i8_rows4_fn four = NULL;
    if (j->p->n == 1 && o1 - o0 == 4)
        four = j->W->row_type ? mixed_rows4(j->W, j->p, j->row0 + o0) : j->four;
    if (four) {
        four(j->y + o0, &j->p->xq, j->W->row + j->row0 + o0);
        return;
    }
    for (int64_t o = o0; o < o1; o++)
        skinny_row(j, j->row0 + o, j->y + o, j->out, in);
}

/* Blocks b0 .. b1 - 1 of job j: the whole ones straight through the job's four-row kernel where it
 * has one for all of them (skinny_block's choice, made once per job), the rest by skinny_block. */
static void skinny_blocks(const skinny_job *j, int64_t b0, int64_t b1, int64_t in)
{
    if (j->four) {
        const unsigned char *const *rows = j->W->row + j->row0;
        int64_t whole = j->out / 4, e = b1 < whole ? b1 : whole;
        for (; b0 < e; b0++)
            j->four(j->y + 4 * b0, &j->p->xq, rows + 4 * b0);
    }
    for (int64_t b = b0; b < b1; b++)
        skinny_block(j, b, in);
}

/* Blocks [*b0, *b1) of job j, whose bytes start at `at` of all the jobs' bytes laid end to end:
 * those whose first stored byte falls in [lo, hi) (each block belongs to exactly one such range of a
 * partition). */
static void job_blocks_in(const skinny_job *j, size_t at, size_t lo, size_t hi, int64_t *b0, int64_t *b1)
{
    size_t bb = j->block_bytes, end = at + (size_t)j->blocks * bb;
    *b0 = lo > at ? (int64_t)((lo - at + bb - 1) / bb) : 0;
    *b1 = hi < end ? (int64_t)((hi - at + bb - 1) / bb) : j->blocks;
}

/* The blocks of the jobs whose first stored byte falls in [lo, hi). */
static void skinny_range(const skinny_job *jobs, int64_t count, size_t lo, size_t hi, int64_t in)
{
    size_t at = 0;
    for (int64_t j = 0; j < count && at < hi; j++) {
        size_t end = at + (size_t)jobs[j].blocks * jobs[j].block_bytes;
        if (end > lo) {
            int64_t b0, b1;
            job_blocks_in(&jobs[j], at, lo, hi, &b0, &b1);
            skinny_blocks(&jobs[j], b0, b1, in);
        }
        at = end;
    }
}

/* Claims pieces of a thread's share [front, back) (one word: front in the low half, back in the
 * high): its owner the front one, another thread the back half of what is left (one claim, not one
 * a piece: the claims of two threads on one word wait on each other). Returns how many, from *piece
 * on; 0 when the share is used up. */
static int64_t skinny_claim(_Atomic uint64_t *share, int from_back, int64_t *piece)
{
    uint64_t v = atomic_load_explicit(share, memory_order_relaxed);
    for (;;) {
        uint64_t front = v & 0xFFFFFFFFu, back = v >> 32;
        if (front >= back)
            return 0;
        uint64_t n = from_back ? (back - front + 1) / 2 : 1;
        uint64_t next = from_back ? (back - n) << 32 | front : back << 32 | (front + 1);
        if (atomic_compare_exchange_weak_explicit(share, &v, next, memory_order_relaxed, memory_order_relaxed)) {
            *piece = (int64_t)(from_back ? back - n : front);
            return (int64_t)n;
        }
    }
}

/* Every block of every job in one parallel region, in pieces of SKINNY_PIECE stored bytes: each
 * thread streams its equal share front to back, then takes halves of what is left from the backs
 * of the shares not yet done. With the shares alone the two threads had finished 0.63-0.80 ms
 * apart in sum over a 0.8B Q4_K_M token's 97 products (the lm_head alone 0.17-0.23 of its
 * 6.1-6.5 ms), one thread streaming alone meanwhile; OpenMP's guided schedule (a half first, then
 * ever smaller pieces) left 0.42-0.74 (the first half is one thread's whatever its memory's pace);
 * taking one 16 KB piece at a time from the back, 0.07-0.10. A claim is a locked compare-and-swap,
 * which waits for the thread's loads in flight (and for the other thread's claim on the same word):
 * with 16 KB pieces this loop held 2.0% of a 0.8B decode's samples (perf), 55-60% of them on the
 * compare-and-swap; with 64 KB pieces and halves taken at once, 0.8%. Which thread computes a row
 * does not change its value.
 * The activations are rounded inside the region, by its first thread, while every thread asks for
 * the first SKINNY_PROLOGUE bytes of its share (the kernels' own prefetches run 32 KB ahead of
 * where they read, so a share's start would otherwise arrive at the memory's latency); before, the
 * rounding ran before the region with the other thread waiting, and a region not taken still cost
 * ~0.4 us. Whole decodes (bench/ab_decode.sh, alternating windows, a slow memory phase): +0.5-0.9%
 * (0.8B Q4_K_M, Q8_0, MoE Q4_K_M); with no prologue or 64 KB of it, within +-1.5% of noise. */
#define SKINNY_PIECE 65536
#define SKINNY_SHARE_STRIDE 8 /* words between two shares' words: one cache line each */
#define SKINNY_PROLOGUE 32768
/* The first piece of thread t's share: `shares` equal shares of `pieces`. */
static uint64_t share_front(uint64_t pieces, int t, int shares) { return pieces * (uint64_t)t / (uint64_t)shares; }

/* Asks for the first `bytes` from stored byte lo on of the jobs' bytes laid end to end into the
 * L2, row by row. */
static void skinny_prologue(const skinny_job *jobs, int64_t count, size_t lo, size_t bytes)
{
    size_t at = 0;
    for (int64_t j = 0; j < count && bytes > 0; j++) {
        size_t end = at + (size_t)jobs[j].blocks * jobs[j].block_bytes, row_bytes = jobs[j].block_bytes / 4;
        if (end > lo) {
            int64_t b0, b1;
            job_blocks_in(&jobs[j], at, lo, end, &b0, &b1);
            for (int64_t o = 4 * b0; o < jobs[j].out && bytes > 0; o++) {
                const char *row = (const char *)jobs[j].W->row[jobs[j].row0 + o];
                for (size_t l = 0; l < row_bytes; l += 64)
                    __builtin_prefetch(row + l, 0, 2);
                bytes = bytes > row_bytes ? bytes - row_bytes : 0;
            }
        }
        at = end;
    }
}

static void skinny_run(const skinny_job *jobs, int64_t count, int64_t in, int64_t work, skinny_x *const *preps,
                       int n_preps)
{
    size_t total = 0;
    for (int64_t j = 0; j < count; j++)
        total += (size_t)jobs[j].blocks * jobs[j].block_bytes;
    uint64_t pieces = (total + SKINNY_PIECE - 1) / SKINNY_PIECE;
    HYLA_ASSERT(pieces < ((uint64_t)1 << 32));
    int shares = omp_get_max_threads(); /* a team has at most this many threads; shares of absent ones are taken */
    _Alignas(64) _Atomic uint64_t share[shares * SKINNY_SHARE_STRIDE];
    for (int t = 0; t < shares; t++)
        atomic_init(&share[t * SKINNY_SHARE_STRIDE],
                    share_front(pieces, t + 1, shares) << 32 | share_front(pieces, t, shares));
#pragma omp parallel HYLA_PAR_IF(work)
    {
        int t = omp_get_thread_num();
        int64_t u;
        skinny_prologue(jobs, count, (size_t)share_front(pieces, t, shares) * SKINNY_PIECE, SKINNY_PROLOGUE);
        if (t == 0) /* the activations, while the other threads' first weights are on their way */
            for (int i = 0; i < n_preps; i++)
                skinny_x_fill(preps[i]);
        if (omp_get_num_threads() > 1) {
#pragma omp barrier
        }
        for (int v = 0; v < shares; v++) { /* its own share from the front, then the others' from the back */
            int o = (t + v) % shares;
            for (int64_t n; (n = skinny_claim(&share[o * SKINNY_SHARE_STRIDE], v > 0, &u)) > 0;)
                skinny_range(jobs, count, (size_t)u * SKINNY_PIECE, (size_t)(u + n) * SKINNY_PIECE, in);
        }
    }
}

int64_t hyla_linear_q_items_scratch_floats(int64_t rows, int64_t count, int64_t in)
{
    /* skinny_floats summed over items of n_j rows, sum n_j = rows: each term is linear in n_j plus
     * at most 20 floats of rounding */
    return skinny_floats(rows, in) + 20 * count;
}

void hyla_linear_q_items(const hyla_qmat *W, const hyla_qitem *items, int64_t count, int64_t in, int64_t out,
                         float *scratch)
{
    skinny_x p[HYLA_QITEMS_MAX], *fills[HYLA_QITEMS_MAX];
    skinny_job jobs[HYLA_QITEMS_MAX];
    int64_t rows = 0;
    HYLA_ASSERT(count <= HYLA_QITEMS_MAX);
    for (int64_t j = 0; j < count; j++) {
        HYLA_ASSERT(items[j].n >= 1 && items[j].n <= HYLA_QUANT_SKINNY_M);
        skinny_x_init(&p[j], W, skinny_kind(W, items[j].n, in), skinny_needs_k4(W), items[j].x, items[j].n, in,
                      scratch);
        scratch += skinny_floats(items[j].n, in);
        jobs[j] = skinny_job_make(W, &p[j], items[j].y, items[j].row0, out, in);
        fills[j] = &p[j];
        rows += items[j].n;
    }
    skinny_run(jobs, count, in, rows * out * in, fills, (int)count);
}

int64_t hyla_linear_q_fanout_scratch_floats(int64_t n, int64_t count, int64_t in)
{
    return count * skinny_floats(n, in); /* at most one preparation of x per product */
}

void hyla_linear_q_fanout(const hyla_qtarget *targets, int64_t count, const float *x, int64_t n, int64_t in,
                          float *scratch)
{
    skinny_x p[HYLA_FANOUT_MAX];
    skinny_job jobs[HYLA_FANOUT_MAX];
    int kind[HYLA_FANOUT_MAX], owner[HYLA_FANOUT_MAX];
    int64_t rows = 0;
    HYLA_ASSERT(count <= HYLA_FANOUT_MAX && n >= 1 && n <= HYLA_QUANT_SKINNY_M);
    for (int64_t j = 0; j < count; j++) { /* products whose x is prepared alike share one preparation */
        const hyla_qmat *W = targets[j].W;
        kind[j] = skinny_kind(W, n, in), owner[j] = (int)j;
        for (int64_t i = 0; i < j && owner[j] == j; i++)
            if (owner[i] == i && kind[i] == kind[j] && targets[i].W->col_map == W->col_map)
                owner[j] = (int)i;
    }
    skinny_x *fills[HYLA_FANOUT_MAX];
    int n_fills = 0;
    for (int64_t j = 0; j < count; j++) {
        if (owner[j] == j) {
            int k4 = 0;
            for (int64_t i = j; i < count; i++)
                k4 |= owner[i] == j && skinny_needs_k4(targets[i].W);
            skinny_x_init(&p[j], targets[j].W, kind[j], k4, x, n, in, scratch);
            fills[n_fills++] = &p[j];
            scratch += skinny_floats(n, in);
        }
        jobs[j] = skinny_job_make(targets[j].W, &p[owner[j]], targets[j].y, targets[j].row0, targets[j].out, in);
        rows += targets[j].out;
    }
    skinny_run(jobs, count, in, n * rows * in, fills, n_fills);
}

void hyla_linear_q(float *y, const float *x, const hyla_qmat *W, int64_t row0, int64_t n, int64_t in, int64_t out,
                   float *scratch)
{
    if (n <= 0 || out <= 0)
        return;
    if (n <= HYLA_QUANT_SKINNY_M) {
        hyla_qitem one = {y, x, n, row0};
        hyla_linear_q_items(W, &one, 1, in, out, scratch);
        return;
    }
    x = stored_order(W, x, n, in, scratch);
    float *tile = scratch + n * in;
    if (hyla_quant_int8_activations && !W->row_type && in % 256 == 0 && hyla_qgemm_supported(W->type)) {
        /* K-quants: the int8 GEMM (activations as Q8_K, the decode path's rounding) */
        hyla_qx xq; /* Q8_0 weights: activations per 32 as llama.cpp's (per 256 measured a 2.3x larger KL) */
        if (hyla_q8_0_activations(W->type))
            hyla_quantize_x_q8_0(&xq, x, n, in, tile);
        else
            hyla_quantize_x(&xq, x, n, in, tile);
        float *pack = tile + hyla_qx_floats(n, in);
        for (int64_t o0 = 0; o0 < out; o0 += HYLA_QGEMM_TILE) {
            int64_t rows = out - o0 < HYLA_QGEMM_TILE ? out - o0 : HYLA_QGEMM_TILE;
            hyla_qgemm_tile(y + o0, out, &xq, n, W->type, W->row + row0 + o0, rows, pack);
        }
        return;
    }
    for (int64_t o0 = 0; o0 < out; o0 += QROWS) {
        int64_t rows = out - o0 < QROWS ? out - o0 : QROWS;
#pragma omp parallel for schedule(static) HYLA_PAR_IF(rows * in)
        for (int64_t r = 0; r < rows; r++)
            hyla_ggml_to_f32(row_type(W, row0 + o0 + r), tile + r * in, W->row[row0 + o0 + r], in);
        hyla_gemm(0, 1, n, rows, in, 1.0f, x, in, tile, in, 0.0f, y + o0, out);
    }
}
