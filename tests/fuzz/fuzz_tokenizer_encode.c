/* libFuzzer harness: the real Qwen3 tokenizer (loaded once) on arbitrary input.
 *   - the input as text: encode, then y = decode(encode(x)) must equal x byte for byte when x is
 *     already NFC (the tokenizer's NFC normalizer changes nothing then), and in every case y must
 *     be a fixed point: decode(encode(y)) == y (normalisation is idempotent);
 *   - the input as little-endian int32 token ids: decode (ids out of range must be an error).
 * Tokenizer path: $HYLA_FUZZ_TOKENIZER, else REPO/tests/tokenizer/qwen3/tokenizer.json (made by
 * `gunzip -c tests/tokenizer/qwen3/tokenizer.json.gz`; tests/fuzz/smoke.sh does it), REPO being
 * $HYLA_REPO or three directories above this binary. */
#include "core/error.h"
#include "io/tokenizer.h"

#include "fuzz_util.h"

#include <utf8proc.h>

static hyla_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    tok = fuzz_qwen_tokenizer("fuzz_tokenizer_encode");
    return 0;
}

/* decode(encode(x)); aborts when either fails (any bytes encode; encode's ids decode). */
static char *round_trip(const uint8_t *data, size_t size, size_t *len)
{
    int32_t *ids = NULL;
    size_t n = 0;
    if (hyla_tokenizer_encode(tok, (const char *)data, size, &ids, &n) != HYLA_OK)
        abort();
    char *back = NULL;
    if (hyla_tokenizer_decode(tok, ids, n, &back, len) != HYLA_OK)
        abort();
    free(ids);
    return back;
}

/* Is every well-formed UTF-8 run of data already in NFC? */
static int is_nfc(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < size;) {
        size_t run = i;
        while (run < size) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate(data + run, (utf8proc_ssize_t)(size - run), &cp);
            if (k <= 0)
                break;
            run += (size_t)k;
        }
        if (run > i) {
            utf8proc_uint8_t *nfc = NULL;
            utf8proc_ssize_t n = utf8proc_map(data + i, (utf8proc_ssize_t)(run - i), &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            int same = n == (utf8proc_ssize_t)(run - i) && !memcmp(nfc, data + i, run - i);
            free(nfc);
            if (!same)
                return 0;
        }
        i = run < size ? run + 1 : size;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t len = 0, len2 = 0;
    char *back = round_trip(data, size, &len);
    if (is_nfc(data, size) && (len != size || (size && memcmp(back, data, size))))
        abort(); /* decode(encode(x)) == x for NFC input */
    char *again = round_trip((const uint8_t *)back, len, &len2);
    if (len2 != len || (len && memcmp(again, back, len)))
        abort(); /* the normalised text is a fixed point */
    free(again);
    free(back);

    /* the same bytes as token ids */
    size_t m = size / 4;
    int32_t *raw = malloc((m ? m : 1) * sizeof *raw);
    if (!raw)
        return 0;
    size_t vs = hyla_tokenizer_vocab_size(tok);
    int any_bad = 0;
    for (size_t i = 0; i < m; i++) {
        raw[i] = (int32_t)fuzz_le32(data + 4 * i);
        any_bad |= raw[i] < 0 || (size_t)raw[i] >= vs;
    }
    back = NULL;
    int rc = hyla_tokenizer_decode(tok, raw, m, &back, &len);
    if (rc == HYLA_OK && any_bad)
        abort(); /* out-of-range ids must be an error */
    free(back);
    free(raw);
    return 0;
}
