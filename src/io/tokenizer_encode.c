/* Byte-level BPE tokenizer: encoding and decoding (tokenizer.h states the rules; a tokenizer
 * loaded by io/tokenizer.c, laid out as io/tokenizer_impl.h says). */
#include "io/tokenizer_impl.h"

#include <stdlib.h>
#include <utf8proc.h>

#include "core/error.h"
#include "core/profile.h"

/* ---- encode ----------------------------------------------------------------------------------- */

typedef struct {
    uint32_t len;    /* piece length; 0 = empty slot */
    uint32_t n_ids;  /* its ids: out[ids_off .. ids_off + n_ids) */
    size_t text_off; /* its bytes: text[text_off .. text_off + len) */
    size_t ids_off;
    uint64_t hash;
} cache_slot;

/* A candidate merge: rank << 32 | position of its left symbol, so that the smallest key is the
 * lowest rank, leftmost on ties. 8 bytes: on long pieces the heap's memory traffic dominates. */
typedef uint64_t heap_entry;

typedef struct {
    const hyla_tokenizer *t;
    const unsigned char *text;
    int32_t *out;           /* [cap_out] ids so far */
    size_t n_out, cap_out;
    int32_t *sym;           /* [3 * ws_cap] BPE symbols of one piece: id, prev, next */
    heap_entry *heap;       /* [3 * ws_cap] candidate merges */
    size_t ws_cap;
    cache_slot *cache;      /* [cache_mask + 1] piece -> ids already emitted */
    size_t cache_mask, cache_used;
    char *spell;            /* [spell_cap] byte-level spelling of a piece (ignore_merges) */
    size_t spell_cap;
    pcre2_match_data *md;
    pcre2_match_context *mc; /* match, depth and heap limits */
} enc_ctx;

/* Regex limits (a hostile tokenizer.json may carry a pattern that backtracks catastrophically).
 * Every match first runs with a small step limit, enough for any piece of ordinary text. A
 * match that needs more, such as the Qwen pattern over a long whitespace run ("\s*[\r\n]+"
 * backtracks over the run once before "\s+(?!\S)" takes it), is retried with a limit linear in
 * the rest of the run, and those retries share one budget per run, linear in its length. So a
 * run of n bytes costs at most n * SMALL + (1e7 + 128 n) steps: linear, whatever the pattern;
 * a pattern that needs more is an error naming it. Depth and heap limits bound the
 * interpreter's memory (the JIT has its own fixed stack; hitting it falls back to the
 * interpreter under these limits). */
#define REGEX_SMALL_STEPS 100000u
#define REGEX_STEPS_PER_BYTE 64.0
#define REGEX_DEPTH_LIMIT 1000000u
#define REGEX_HEAP_LIMIT_KIB (64u * 1024u)

/* Step limits do not count a lookahead's scan over the subject (".(?=.*z)" costs the rest of
 * the run per match: quadratic in the run), so a clock backstops them: 2 s + 20 us per byte, 40x
 * what the Qwen pattern needs even on a whitespace run (0.5 us/byte here). Only a hostile
 * pattern can reach it, so the clock never decides ordinary tokenization. */
#define REGEX_SECONDS_BASE 2.0
#define REGEX_SECONDS_PER_BYTE 2e-5

static uint32_t regex_limit(double steps) { return steps < UINT32_MAX ? (uint32_t)steps : UINT32_MAX; }

static int out_reserve(enc_ctx *c, size_t extra)
{
    if (c->n_out + extra <= c->cap_out)
        return HYLA_OK;
    size_t cap = c->cap_out ? c->cap_out : 64;
    while (cap < c->n_out + extra)
        cap *= 2;
    int32_t *p = realloc(c->out, cap * sizeof *p);
    if (!p)
        return hyla_error_set(HYLA_ERR_NOMEM, "tokenizer: cannot grow output to %zu ids", cap);
    c->out = p;
    c->cap_out = cap;
    return HYLA_OK;
}

static int out_push(enc_ctx *c, int32_t id)
{
    HYLA_TRY(out_reserve(c, 1));
    c->out[c->n_out++] = id;
    return HYLA_OK;
}

static void heap_push_pair(const hyla_tokenizer *t, heap_entry *h, size_t *n, int32_t pos, int32_t left,
                           int32_t right)
{
    const merge_slot *m = merge_find(t, left, right);
    if (m->key == MERGE_EMPTY)
        return;
    heap_entry e = (uint64_t)(uint32_t)m->rank << 32 | (uint32_t)pos;
    size_t i = (*n)++;
    while (i > 0 && e < h[(i - 1) / 2]) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static heap_entry heap_pop(heap_entry *h, size_t *n)
{
    heap_entry top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= *n)
            break;
        if (k + 1 < *n && h[k + 1] < h[k])
            k++;
        if (h[k] >= last)
            break;
        h[i] = h[k];
        i = k;
    }
    h[i] = last;
    return top;
}

static int workspace_reserve(enc_ctx *c, size_t n)
{
    if (n <= c->ws_cap)
        return HYLA_OK;
    if (n > INT32_MAX / 4)
        return hyla_error_set(HYLA_ERR_ARG, "tokenizer: pre-token of %zu bytes is too long for BPE", n);
    size_t cap = n < 64 ? 64 : n;
    free(c->sym);
    free(c->heap);
    c->sym = malloc(3 * cap * sizeof *c->sym);
    c->heap = malloc(3 * cap * sizeof *c->heap);
    c->ws_cap = cap;
    if (!c->sym || !c->heap) {
        c->ws_cap = 0;
        return hyla_error_set(HYLA_ERR_NOMEM, "tokenizer: cannot allocate BPE workspace for %zu bytes", n);
    }
    return HYLA_OK;
}

/* BPE-merge the n bytes at p and append the ids. Each merge takes the candidate pair with the
 * lowest rank, leftmost on ties (Hugging Face's order); an entry whose pair has changed since it
 * was pushed is skipped (a merge rank names exactly one pair, so comparing ranks suffices). */
static int bpe(enc_ctx *c, const unsigned char *p, size_t n)
{
    const hyla_tokenizer *t = c->t;
    HYLA_TRY(workspace_reserve(c, n));
    int32_t *id = c->sym, *prev = c->sym + c->ws_cap, *next = c->sym + 2 * c->ws_cap;
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        id[i] = t->byte_ids[p[i]];
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++)
        heap_push_pair(t, c->heap, &nh, (int32_t)i, id[i], id[i + 1]);
    while (nh > 0) {
        heap_entry e = heap_pop(c->heap, &nh);
        int32_t pos = (int32_t)(uint32_t)e, r = next[pos];
        if (id[pos] < 0 || r < 0)
            continue; /* stale: the left symbol was merged away (dead symbols hold id -1) or is last */
        const merge_slot *m = merge_find(t, id[pos], id[r]);
        if (m->key == MERGE_EMPTY || (uint32_t)m->rank != (uint32_t)(e >> 32))
            continue; /* stale: the pair at pos changed since this entry was pushed */
        id[pos] = m->merged;
        id[r] = -1;
        next[pos] = next[r];
        if (next[r] >= 0)
            prev[next[r]] = pos;
        if (prev[pos] >= 0)
            heap_push_pair(t, c->heap, &nh, prev[pos], id[prev[pos]], id[pos]);
        if (next[pos] >= 0)
            heap_push_pair(t, c->heap, &nh, pos, id[pos], id[next[pos]]);
    }
    for (int32_t i = 0; i >= 0; i = next[i])
        HYLA_TRY(out_push(c, id[i]));
    return HYLA_OK;
}

static cache_slot *cache_find(enc_ctx *c, uint64_t h, size_t off, size_t n)
{
    for (size_t i = (size_t)h & c->cache_mask;; i = (i + 1) & c->cache_mask) {
        cache_slot *s = &c->cache[i];
        if (s->len == 0 || (s->hash == h && s->len == n && memcmp(c->text + s->text_off, c->text + off, n) == 0))
            return s;
    }
}

static int cache_grow(enc_ctx *c)
{
    size_t cap = c->cache ? 2 * (c->cache_mask + 1) : 1024;
    cache_slot *old = c->cache;
    size_t old_cap = old ? c->cache_mask + 1 : 0;
    c->cache = calloc(cap, sizeof *c->cache);
    if (!c->cache) {
        c->cache = old;
        return hyla_error_set(HYLA_ERR_NOMEM, "tokenizer: cannot grow piece cache to %zu entries", cap);
    }
    c->cache_mask = cap - 1;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].len)
            *cache_find(c, old[i].hash, old[i].text_off, old[i].len) = old[i];
    free(old);
    return HYLA_OK;
}

static int spelling_lookup(enc_ctx *c, const unsigned char *p, size_t n, int32_t *id)
{
    if (2 * n > c->spell_cap) {
        char *s = realloc(c->spell, 2 * n);
        if (!s)
            return hyla_error_set(HYLA_ERR_NOMEM, "tokenizer: cannot allocate %zu bytes", 2 * n);
        c->spell = s;
        c->spell_cap = 2 * n;
    }
    uint32_t b2u[256];
    byte_level_table(b2u);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += utf8_put(c->spell + k, b2u[p[i]]);
    *id = str_table_find(c->t, &c->t->vocab, c->spell, k);
    return HYLA_OK;
}

/* Encode one pre-token piece text[off .. off + n), through the per-call cache. */
static int encode_piece(enc_ctx *c, size_t off, size_t n)
{
    if (n == 1)
        return out_push(c, c->t->byte_ids[c->text[off]]);
    cache_slot *slot = NULL;
    uint64_t h = 0;
    if (n <= CACHE_MAX_PIECE) {
        h = hash_bytes(c->text + off, n);
        if (!c->cache)
            HYLA_TRY(cache_grow(c));
        slot = cache_find(c, h, off, n);
        if (slot->len) {
            HYLA_TRY(out_reserve(c, slot->n_ids));
            memcpy(c->out + c->n_out, c->out + slot->ids_off, slot->n_ids * sizeof *c->out);
            c->n_out += slot->n_ids;
            return HYLA_OK;
        }
    }
    size_t before = c->n_out;
    int32_t whole = -1;
    if (c->t->ignore_merges)
        HYLA_TRY(spelling_lookup(c, c->text + off, n, &whole));
    HYLA_TRY(whole >= 0 ? out_push(c, whole) : bpe(c, c->text + off, n));
    if (slot && c->cache_used < CACHE_MAX_ENTRIES) {
        *slot = (cache_slot){(uint32_t)n, (uint32_t)(c->n_out - before), off, before, h};
        if (++c->cache_used * 2 > c->cache_mask + 1)
            HYLA_TRY(cache_grow(c));
    }
    return HYLA_OK;
}

/* Pre-tokenize the valid UTF-8 run text[s .. e) with the regex ("Isolated": matches and the
 * gaps between them are pieces; empty matches yield nothing) and encode each piece. */
static int encode_run(enc_ctx *c, size_t s, size_t e)
{
    const hyla_tokenizer *t = c->t;
    if (!t->re)
        return encode_piece(c, s, e - s);
    const unsigned char *subj = c->text + s;
    size_t n = e - s, start = 0, last = 0;
    double retry_budget = 1e7 + 2 * REGEX_STEPS_PER_BYTE * (double)n;
    double t0 = hyla_now(), deadline = REGEX_SECONDS_BASE + REGEX_SECONDS_PER_BYTE * (double)n;
    for (size_t calls = 1; start < n; calls++) {
        if (calls % 256 == 0 && hyla_now() - t0 > deadline)
            return hyla_error_set(HYLA_ERR_ARG, "%s: pre-tokenizer regex '%s' takes over %.0f s for a %zu-byte run (input "
                                  "byte %zu); a pattern this slow is refused", t->path, t->re_excerpt, deadline, n, s + start);
        pcre2_set_match_limit(c->mc, REGEX_SMALL_STEPS);
        int rc = pcre2_match(t->re, subj, n, start, PCRE2_NO_UTF_CHECK, c->md, c->mc);
        if (rc == PCRE2_ERROR_MATCHLIMIT) {
            double big = REGEX_SMALL_STEPS + REGEX_STEPS_PER_BYTE * (double)(n - start);
            if (big > retry_budget)
                return hyla_error_set(HYLA_ERR_ARG, "%s: pre-tokenizer regex '%s' exceeds its backtracking budget at input "
                                      "byte %zu (a pattern this slow is refused)", t->path, t->re_excerpt, s + start);
            retry_budget -= big;
            pcre2_set_match_limit(c->mc, regex_limit(big));
            rc = pcre2_match(t->re, subj, n, start, PCRE2_NO_UTF_CHECK, c->md, c->mc);
        }
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(t->re, subj, n, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, c->md, c->mc);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        if (rc < 0 || ov[0] < last || ov[1] < ov[0]) {
            PCRE2_UCHAR msg[256] = "match outside the subject";
            if (rc < 0)
                pcre2_get_error_message(rc, msg, sizeof msg);
            return hyla_error_set(HYLA_ERR_ARG, "%s: pre-tokenizer regex '%s' failed at input byte %zu: %s", t->path,
                                  t->re_excerpt, s + start, (const char *)msg);
        }
        size_t ms = ov[0], me = ov[1];
        if (ms > last)
            HYLA_TRY(encode_piece(c, s + last, ms - last));
        if (me > ms) {
            HYLA_TRY(encode_piece(c, s + ms, me - ms));
            last = start = me;
        } else {
            last = ms;
            start = ms < n ? ms + utf8_char_len(subj + ms, n - ms) : n;
        }
    }
    return last < n ? encode_piece(c, s + last, n - last) : HYLA_OK;
}

/* Encode text[s .. e), which holds no added token: valid UTF-8 runs go through the regex, each
 * byte that starts no well-formed sequence is a piece of its own. */
static int encode_span(enc_ctx *c, size_t s, size_t e)
{
    size_t i = s;
    while (i < e) {
        size_t run = i, k;
        while (run < e && (k = utf8_char_len(c->text + run, e - run)) > 0)
            run += k;
        if (run > i)
            HYLA_TRY(encode_run(c, i, run));
        if (run < e)
            HYLA_TRY(encode_piece(c, run, 1));
        i = run < e ? run + 1 : e;
    }
    return HYLA_OK;
}

/* Leftmost, then longest, added token in text[pos .. len); *at = len if none. */
static void find_added(const hyla_tokenizer *t, const unsigned char *text, size_t pos, size_t len, size_t *at,
                       int32_t *id)
{
    for (size_t i = pos; i < len; i++) {
        for (uint32_t k = t->added_first[text[i]]; k < t->added_first[text[i] + 1]; k++) {
            const tok_entry *e = &t->tokens[t->added_order[k]];
            if (e->str_len <= len - i && memcmp(text + i, t->arena + e->str_off, e->str_len) == 0) {
                *at = i;
                *id = t->added_order[k];
                return;
            }
        }
    }
    *at = len;
    *id = -1;
}

/* The input cut at added tokens: span k is [start, end) of the (normalised) text, then token id
 * (-1 after the last span). */
typedef struct {
    size_t end;
    int32_t id;
} span;

typedef struct {
    unsigned char *text; /* normalised copy (NULL: the input itself) */
    size_t len, cap;
    span *spans;
    size_t n_spans, cap_spans;
} split_text;

static int put_bytes(split_text *o, const void *p, size_t n)
{
    if (o->len + n > o->cap) {
        size_t cap = 2 * (o->len + n) + 16;
        unsigned char *q = realloc(o->text, cap);
        if (!q)
            return hyla_error_set(HYLA_ERR_NOMEM, "tokenizer: out of memory normalising the input");
        o->text = q, o->cap = cap;
    }
    memcpy(o->text + o->len, p, n);
    o->len += n;
    return HYLA_OK;
}

/* NFC-normalise text[s, e) (no added token inside) into o: each valid UTF-8 run through utf8proc,
 * bytes that start no well-formed sequence unchanged (they stay pieces of their own). */
static int put_nfc(split_text *o, const unsigned char *text, size_t s, size_t e)
{
    size_t i = s;
    while (i < e) {
        size_t run = i, k;
        while (run < e && (k = utf8_char_len(text + run, e - run)) > 0)
            run += k;
        if (run > i) {
            utf8proc_uint8_t *nfc = NULL;
            utf8proc_ssize_t n = utf8proc_map(text + i, (utf8proc_ssize_t)(run - i), &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            int st = n < 0 ? hyla_error_set(HYLA_ERR_ARG, "tokenizer: NFC normalisation failed: %s", utf8proc_errmsg(n))
                           : put_bytes(o, nfc, (size_t)n);
            free(nfc);
            HYLA_TRY(st);
        }
        if (run < e)
            HYLA_TRY(put_bytes(o, text + run, 1));
        i = run < e ? run + 1 : e;
    }
    return HYLA_OK;
}

static int push_span(split_text *o, size_t end, int32_t id)
{
    if (o->n_spans == o->cap_spans) {
        size_t cap = 2 * o->cap_spans + 8;
        span *p = realloc(o->spans, cap * sizeof *p);
        if (!p)
            return hyla_error_set(HYLA_ERR_NOMEM, "tokenizer: out of memory");
        o->spans = p, o->cap_spans = cap;
    }
    o->spans[o->n_spans++] = (span){end, id};
    return HYLA_OK;
}

/* Added tokens are matched in the raw input (as Hugging Face does for normalized: false tokens);
 * with an NFC normalizer the text between them is normalised. */
static int split_input(const hyla_tokenizer *t, const unsigned char *text, size_t len, split_text *o)
{
    for (size_t pos = 0; pos < len;) {
        size_t at;
        int32_t id;
        find_added(t, text, pos, len, &at, &id);
        if (t->nfc) {
            HYLA_TRY(put_nfc(o, text, pos, at));
            HYLA_TRY(push_span(o, o->len, id));
            if (id >= 0)
                HYLA_TRY(put_bytes(o, text + at, t->tokens[id].str_len));
        } else
            HYLA_TRY(push_span(o, at, id));
        pos = id >= 0 ? at + t->tokens[id].str_len : len;
    }
    return HYLA_OK;
}

int hyla_tokenizer_encode(const hyla_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    if (!text && len > 0)
        return hyla_error_set(HYLA_ERR_ARG, "tokenizer encode: NULL text with length %zu", len);
    split_text parts = {0};
    int st = split_input(t, (const unsigned char *)text, len, &parts);
    enc_ctx c = {.t = t, .text = t->nfc ? parts.text : (const unsigned char *)text};
    if (st == HYLA_OK)
        st = out_reserve(&c, len / 4 + 16);
    if (st == HYLA_OK && t->re &&
        (!(c.md = pcre2_match_data_create_from_pattern(t->re, NULL)) || !(c.mc = pcre2_match_context_create(NULL))))
        st = hyla_error_set(HYLA_ERR_NOMEM, "tokenizer encode: cannot allocate match data");
    if (st == HYLA_OK && c.mc) {
        pcre2_set_depth_limit(c.mc, REGEX_DEPTH_LIMIT);
        pcre2_set_heap_limit(c.mc, REGEX_HEAP_LIMIT_KIB);
    }
    size_t pos = 0;
    for (size_t k = 0; st == HYLA_OK && k < parts.n_spans; k++) {
        const span *sp = &parts.spans[k];
        st = encode_span(&c, pos, sp->end);
        if (st == HYLA_OK && sp->id >= 0)
            st = out_push(&c, sp->id);
        pos = sp->end + (sp->id >= 0 ? t->tokens[sp->id].str_len : 0);
    }
    pcre2_match_data_free(c.md);
    pcre2_match_context_free(c.mc);
    free(c.sym);
    free(c.heap);
    free(c.cache);
    free(c.spell);
    free(parts.text);
    free(parts.spans);
    if (st != HYLA_OK) {
        free(c.out);
        return st;
    }
    *ids = c.out;
    *n_ids = c.n_out;
    return HYLA_OK;
}

/* ---- decode ----------------------------------------------------------------------------------- */

int hyla_tokenizer_decode(const hyla_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    if (!ids && n > 0)
        return hyla_error_set(HYLA_ERR_ARG, "tokenizer decode: NULL ids with count %zu", n);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= t->vocab_size)
            return hyla_error_set(HYLA_ERR_ARG, "%s: decode: id %d (index %zu) out of range [0, %zu)", t->path, id,
                                  i, t->vocab_size);
        if (t->tokens[id].kind == TOK_NONE)
            return hyla_error_set(HYLA_ERR_ARG, "%s: decode: id %d (index %zu) has no token", t->path, id, i);
        total += t->tokens[id].dec_len;
    }
    char *buf = malloc(total + 1);
    if (!buf)
        return hyla_error_set(HYLA_ERR_NOMEM, "tokenizer decode: cannot allocate %zu bytes", total + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const tok_entry *e = &t->tokens[ids[i]];
        memcpy(buf + k, t->arena + e->dec_off, e->dec_len);
        k += e->dec_len;
    }
    buf[k] = '\0';
    *text = buf;
    *len = k;
    return HYLA_OK;
}
