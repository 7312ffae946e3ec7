/* Training data: a token stream cut into sequences.
 *
 * Sources:
 *  - token file (format below), e.g. written by `hyla tokenize` or hyla_data_write_tokens;
 *  - a text file through the byte-level tokenizer (token id = byte value; needs vocab >= 256);
 *  - synthetic: learnable arithmetic sequences, a pure function of (seed, position).
 * Token file format ("HYLATOK1"): bytes 0-7 magic "HYLATOK1"; 8-11 uint32 LE vocabulary size the
 * ids were made for (0 = unknown); 12-15 uint32 LE reserved (0); 16-23 uint64 LE token count N;
 * then N uint32 LE token ids. Nothing may follow.
 *
 * Batches are B sequences of T consecutive tokens each, taken in order from the stream position
 * (which wraps at the end); the position is saved in checkpoints so a resumed run reads exactly
 * the tokens the uninterrupted run would have. */
#ifndef HYLA_TRAIN_DATA_H
#define HYLA_TRAIN_DATA_H

#include <stdint.h>

typedef struct {
    int32_t *tokens;       /* [n_tokens], owned (NULL for synthetic) */
    int64_t n_tokens;
    int synthetic;
    uint64_t seed;
    int64_t vocab;
    int64_t pos;           /* index of the next token (synthetic: next sequence index) */
    char source[512];      /* file path or "synthetic" */
} hyla_data;

int hyla_data_open_tokens(hyla_data *d, const char *path, int64_t vocab);
int hyla_data_open_text(hyla_data *d, const char *path, int64_t vocab);
void hyla_data_open_synthetic(hyla_data *d, uint64_t seed, int64_t vocab);
void hyla_data_close(hyla_data *d);
/* out [n_seq, T]; advances the position. */
void hyla_data_next(hyla_data *d, int32_t *out, int64_t n_seq, int64_t T);
int hyla_data_write_tokens(const char *path, const int32_t *ids, int64_t n, int64_t vocab);

#endif
