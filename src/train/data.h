/* Training data: a token stream cut into sequences, or documents with label masks.
 *
 * Sources:
 *  - token file (formats below), e.g. written by `hyla tokenize` or hyla_data_write_tokens;
 *  - a text file through the byte-level tokenizer (token id = byte value; needs vocab >= 256);
 *  - a JSONL file of documents (train/jsonl.c): {"text": ...} or {"messages": [...]};
 *  - synthetic: learnable arithmetic sequences, a pure function of (seed, position).
 * Token file "HYLATOK1" (a stream): bytes 0-7 magic; 8-11 uint32 LE vocabulary size the ids were
 * made for (0 = unknown); 12-15 uint32 LE reserved (0); 16-23 uint64 LE token count N; then N
 * uint32 LE token ids. Nothing may follow.
 * Token file "HYLATOK2" (documents): bytes 0-7 magic; 8-11 vocabulary (as above); 12-15 uint32 LE
 * reserved (0); 16-23 uint64 N tokens; 24-31 uint64 D documents; N uint32 ids; D + 1 uint64
 * document starts (0 = s_0 <= s_1 <= ... <= s_D = N); N bytes of mask (1 = the token is a
 * training target, 0 = context only). Nothing may follow.
 *
 * Streams: batches are B sequences of T consecutive tokens each, taken in order from the stream
 * position (which wraps at the end); labels are the next tokens (trainer's default).
 * Documents: every row holds one document alone (never two: no state or attention crosses a
 * document). A document of n tokens fills ceil((n - 1) / (T - 1)) rows: row w holds tokens
 * [w (T - 1), w (T - 1) + T), so consecutive rows overlap by one token and every target is
 * trained exactly once (a row starts without the context before it); a short row is padded with
 * token 0 whose labels are ignored. labels[t] = token t + 1 when it is a target, else -100.
 * Documents with fewer than 2 tokens have no target and are dropped at load. The row order is the
 * documents' order, or (shuffle) a permutation of the documents that is a pure function of
 * (seed, epoch); rows of one document stay in order.
 * Packing (documents, pack = 1): the same pieces (a document, or one of its rows of T when it is
 * longer) in the same order are packed into rows: a piece goes into the current row if it fits,
 * else the row is closed with a padding piece (token 0, labels -100) and the piece starts the
 * next row (and a row ends with its epoch). Every row is then a tiling by documents: seg_len[0..n_seg) after each
 * hyla_data_next, for hyla_executor_set_segments; a document's last token has label -100, so no
 * loss crosses a boundary. pos then counts pieces.
 * The position (row, piece or token index) is saved in checkpoints, so a resumed run reads exactly
 * the rows the uninterrupted run would have. */
#ifndef HYLA_TRAIN_DATA_H
#define HYLA_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int32_t *tokens;       /* [n_tokens], owned (NULL for synthetic) */
    int64_t n_tokens;
    int synthetic;
    uint64_t seed;
    int64_t vocab;
    int64_t pos;           /* index of the next token (synthetic: next sequence; documents: next row) */
    char source[512];      /* file path or "synthetic" */
    uint64_t hash;         /* hyla_hash64 of the source file's bytes (0 for synthetic) */
    /* documents (NULL / 0 for streams) */
    unsigned char *mask;   /* [n_tokens] 1 = training target */
    int64_t *doc_start;    /* [n_docs + 1] */
    int64_t n_docs;
    int shuffle;           /* permute the documents every epoch (seeded) */
    int64_t rows_T;        /* the row length the row table below is for */
    int64_t *rows;         /* [n_rows] current epoch's row starts (token index); row ends at its document's end */
    int64_t *row_doc;      /* [n_rows] document of each row */
    int64_t n_rows, rows_epoch;
    int64_t n_targets;     /* tokens with mask 1 that can be a label (not a document's first) */
    /* packing (documents): the last hyla_data_next's tiling of its rows, owned */
    int pack;
    int64_t *seg_len, n_seg, seg_cap;
} hyla_data;

int hyla_data_open_tokens(hyla_data *d, const char *path, int64_t vocab);
int hyla_data_open_text(hyla_data *d, const char *path, int64_t vocab);
void hyla_data_open_synthetic(hyla_data *d, uint64_t seed, int64_t vocab);
void hyla_data_close(hyla_data *d);
/* out [n_seq, T]; labels [n_seq, T] (documents only: filled as described above; may be NULL for
 * streams, whose labels are the next tokens); advances the position. Fails only when out of memory. */
int hyla_data_next(hyla_data *d, int32_t *out, int32_t *labels, int64_t n_seq, int64_t T);
/* Does this source come with its own labels (documents)? */
static inline int hyla_data_labelled(const hyla_data *d) { return d->mask != NULL; }
/* Rows per epoch for row length T (documents), or tokens / T (streams). */
int64_t hyla_data_rows_per_epoch(const hyla_data *d, int64_t T);
/* The epoch (0-based) the next row belongs to. */
int64_t hyla_data_epoch(const hyla_data *d, int64_t T);
int hyla_data_write_tokens(const char *path, const int32_t *ids, int64_t n, int64_t vocab);
/* HYLATOK2: n tokens in n_docs documents (doc_start [n_docs + 1]) with their mask. */
int hyla_data_write_documents(const char *path, const int32_t *ids, const unsigned char *mask, int64_t n,
                              const int64_t *doc_start, int64_t n_docs, int64_t vocab);
/* Take ownership of documents (tokens, mask, doc_start malloc'd): drops documents with fewer than
 * 2 tokens, validates ids against vocab. `source` names the file in messages. */
int hyla_data_set_documents(hyla_data *d, int32_t *tokens, unsigned char *mask, int64_t n_tokens, int64_t *doc_start,
                            int64_t n_docs, int64_t vocab, const char *source);

struct hyla_tokenizer;
/* JSONL documents (train/jsonl.c), tokenized with `tok`; a bad line names the file and line. */
int hyla_data_open_jsonl(hyla_data *d, const char *path, const struct hyla_tokenizer *tok, int64_t vocab);
/* Read the documents of `path` (JSONL) into arrays: the same parse, for `hyla tokenize`; *hash (may
 * be NULL) gets hyla_hash64 of the file's bytes. */
int hyla_jsonl_read(const char *path, const struct hyla_tokenizer *tok, int32_t **ids, unsigned char **mask,
                    int64_t *n_tokens, int64_t **doc_start, int64_t *n_docs, uint64_t *hash);

#endif
