/* Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (Qwen2/Qwen3 layout).
 *
 * Supported tokenizer.json shape (anything else is a load error naming the field):
 *   model:         type "BPE"; vocab {token: id}; merges ["a b", ...] or [["a","b"], ...];
 *                  ignore_merges honoured; dropout null/0, byte_fallback false,
 *                  continuing_subword_prefix / end_of_word_suffix empty.
 *   pre_tokenizer: a "Split" {pattern: {Regex}, behavior "Isolated", invert false} and a
 *                  "ByteLevel" {add_prefix_space false}, alone or in a "Sequence"; a ByteLevel
 *                  with use_regex true (the default) and no Split uses the GPT-2 pattern.
 *                  The pattern is compiled with PCRE2 (PCRE2_UTF | PCRE2_UCP).
 *   decoder:       "ByteLevel".
 *   normalizer:    null, or "NFC": the text between added tokens is NFC-normalised (utf8proc)
 *                  before pre-tokenization, as Hugging Face does, so decomposed input gets the
 *                  same ids as its composed form (and decode gives the composed bytes).
 *   added_tokens:  [{id, content, special, lstrip/rstrip/single_word false}].
 *   Every one of the 256 byte-level tokens (GPT-2 bytes_to_unicode) must be in model.vocab.
 *
 * Encoding. Added tokens (special or not) are matched literally in the raw input first,
 * leftmost, longest at a position, and each becomes its own id. Each stretch between them
 * is split into valid-UTF-8 runs and invalid bytes:
 *   invalid-UTF-8 rule: a byte that does not start a well-formed UTF-8 sequence (Unicode
 *   Table 3-7: no overlongs, surrogates or code points above U+10FFFF; a truncated sequence
 *   counts as invalid at its lead byte) is a piece of its own and encodes to its byte token;
 *   scanning resumes at the next byte. Each valid run is pre-tokenized by the regex on its
 *   own (the regex never sees past an invalid byte or an added token).
 * Each piece is BPE-merged by rank (lowest merge rank first, leftmost on ties; the same order
 * as Hugging Face tokenizers). No BOS/EOS or other post-processing ids are added.
 * Hence decode(encode(x)) == x byte for byte for every input x that the normalizer leaves alone
 * (every x without a normalizer; with NFC, every x whose valid UTF-8 runs are NFC).
 * Cost: about 30 MB/s on ordinary text (one core); merging is O(m log m) in a piece of m
 * bytes, so a single multi-megabyte piece (megabytes of one repeated letter or of whitespace)
 * runs at a few MB/s, as in Hugging Face's implementation.
 *
 * Decoding maps each id to its bytes: vocab tokens through the inverse byte-level table (a
 * token with a character outside that table decodes to its own UTF-8 bytes, as in Hugging
 * Face), added tokens to their content. The output may be invalid UTF-8 when ids cut a
 * character.
 *
 * A loaded tokenizer is read-only: encode/decode/token_id may run concurrently on one. */
#ifndef HYLA_IO_TOKENIZER_H
#define HYLA_IO_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct hyla_tokenizer hyla_tokenizer;

/* Load `path` (a tokenizer.json, or a .gguf file: its tokenizer.ggml.*, hyla_tokenizer_load_gguf).
 * On success *out is owned by the caller (free with hyla_tokenizer_free); on failure *out is NULL
 * and the message names the file and field. */
int hyla_tokenizer_load(hyla_tokenizer **out, const char *path);
void hyla_tokenizer_free(hyla_tokenizer *t);

/* Encode `len` bytes of `text` (any bytes; NUL and invalid UTF-8 included). *ids is a
 * malloc'd array of *n_ids ids owned by the caller (non-NULL even when *n_ids is 0). */
int hyla_tokenizer_encode(const hyla_tokenizer *t, const char *text, size_t len, int32_t **ids,
                          size_t *n_ids);

/* Decode `n` ids into bytes. *text is malloc'd, owned by the caller, *len bytes long plus a
 * terminating NUL not counted in *len. An id outside [0, vocab_size) or with no token is an
 * error naming the id and its index. */
int hyla_tokenizer_decode(const hyla_tokenizer *t, const int32_t *ids, size_t n, char **text,
                          size_t *len);

/* Id of `token`: an added token's content (e.g. "<|im_end|>") or a vocab entry in its
 * byte-level spelling (e.g. "Ġthe" for " the"). Added tokens are looked up first.
 * Returns -1 if absent. */
int32_t hyla_tokenizer_token_id(const hyla_tokenizer *t, const char *token);

/* Id `id`'s spelling (a model.vocab string in its byte-level spelling, or an added token's
 * content; not NUL-terminated in general: use *len) and what it is. An id with no token is
 * HYLA_TOKEN_UNUSED with an empty spelling. For exporters (GGUF). */
typedef enum { HYLA_TOKEN_UNUSED, HYLA_TOKEN_NORMAL, HYLA_TOKEN_SPECIAL, HYLA_TOKEN_ADDED } hyla_token_kind;
hyla_token_kind hyla_tokenizer_token(const hyla_tokenizer *t, int32_t id, const char **spelling, size_t *len);
/* Number of model.merges entries, and the merges in rank order as (left id, right id) pairs into
 * pairs[2 * merge_count]; returns how many were written (a pair listed twice keeps only its
 * last rank, as in Hugging Face, so it can be fewer). */
size_t hyla_tokenizer_merge_count(const hyla_tokenizer *t);
size_t hyla_tokenizer_merges(const hyla_tokenizer *t, int32_t *pairs);
/* The pre-tokenizer's split regex as written in tokenizer.json (the GPT-2 pattern for a bare
 * ByteLevel), or NULL when there is none. */
const char *hyla_tokenizer_pattern(const hyla_tokenizer *t);

/* The vocabulary of a GGUF file (tokenizer.ggml.*, io/tokenizer_gguf.c): the tokenizer.json it
 * stands for, checked as one; errors name the file and key. */
struct hyla_gguf_file;
int hyla_tokenizer_from_gguf(hyla_tokenizer **out, const struct hyla_gguf_file *f);
/* The same from the file at `path` (opened, read and closed). */
int hyla_tokenizer_load_gguf(hyla_tokenizer **out, const char *path);
/* dir/tokenizer.json (the Hugging Face file the GGUF vocabulary stands for) and
 * dir/tokenizer_config.json (its special tokens, add_bos / add_eos, chat template) from the GGUF
 * file at gguf_path, each written atomically; nothing for a file without tokenizer.ggml.tokens. */
int hyla_tokenizer_files_from_gguf(const char *dir, const char *gguf_path);
/* The same from an open GGUF file. */
int hyla_tokenizer_gguf_write_files(const struct hyla_gguf_file *f, const char *dir);
/* HYLA_OK when f's vocabulary (if it has one) makes those files: the check a model loaded from the
 * file for training makes first, so that its saves cannot fail on the vocabulary. */
int hyla_tokenizer_gguf_check(const struct hyla_gguf_file *f);
/* llama.cpp's name for a pre-tokenizer split regex ("qwen2", "qwen35", "gpt-2"), or NULL. */
const char *hyla_tokenizer_pre_name(const char *pattern);

/* One more than the largest id (vocab and added tokens), e.g. 151669 for Qwen3. */
size_t hyla_tokenizer_vocab_size(const hyla_tokenizer *t);

#endif
