/* JSONL training documents: one JSON object per line,
 *   {"text": "..."}                       every token a training target, or
 *   {"messages": [{"role", "content"}]}   rendered as ChatML (io/chat.h); only the assistant
 *                                         messages' tokens (and their <|im_end|>) are targets.
 * Blank lines are skipped; anything else is an error naming the file and line. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/hash.h"
#include "io/chat.h"
#include "io/fileio.h"
#include "io/tokenizer.h"
#include "train/data.h"

typedef struct {
    int32_t *ids;
    unsigned char *mask;
    int64_t n, cap;
    int64_t *starts;
    int64_t n_docs, cap_docs;
} docs_buf;

static int append(docs_buf *b, const int32_t *ids, const unsigned char *mask, int64_t n, unsigned char all)
{
    if (b->n + n > b->cap) {
        int64_t cap = 2 * (b->n + n) + 1024;
        int32_t *i = realloc(b->ids, (size_t)cap * sizeof *i);
        if (i)
            b->ids = i;
        unsigned char *m = i ? realloc(b->mask, (size_t)cap) : NULL;
        if (!m)
            return hyla_error_set(HYLA_ERR_NOMEM, "out of memory reading documents");
        b->mask = m, b->cap = cap;
    }
    if (b->n_docs + 2 > b->cap_docs) {
        int64_t cap = 2 * b->cap_docs + 64;
        int64_t *s = realloc(b->starts, (size_t)cap * sizeof *s);
        if (!s)
            return hyla_error_set(HYLA_ERR_NOMEM, "out of memory reading documents");
        b->starts = s, b->cap_docs = cap;
    }
    b->starts[b->n_docs++] = b->n;
    if (n > 0) { /* an empty first document: ids and mask are still NULL (no offset on a null pointer) */
        memcpy(b->ids + b->n, ids, (size_t)n * sizeof *ids);
        if (mask)
            memcpy(b->mask + b->n, mask, (size_t)n);
        else
            memset(b->mask + b->n, all, (size_t)n);
    }
    b->n += n;
    b->starts[b->n_docs] = b->n;
    return HYLA_OK;
}

static int parse_line(docs_buf *b, const hyla_tokenizer *tok, const char *line, size_t len, const char *where)
{
    cJSON *root = cJSON_ParseWithLength(line, len);
    if (!root)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: not valid JSON", where);
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text");
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(root, "messages");
    int32_t *ids = NULL;
    unsigned char *mask = NULL;
    size_t n = 0;
    int st;
    if (!cJSON_IsObject(root) || (!text == !messages))
        st = hyla_error_set(HYLA_ERR_FORMAT, "%s: expected an object with either \"text\" or \"messages\"", where);
    else if (text && !cJSON_IsString(text))
        st = hyla_error_set(HYLA_ERR_FORMAT, "%s: \"text\" must be a string", where);
    else if (text) {
        st = hyla_tokenizer_encode(tok, text->valuestring, strlen(text->valuestring), &ids, &n);
        if (st == HYLA_OK)
            st = append(b, ids, NULL, (int64_t)n, 1);
    } else {
        hyla_chat chat;
        st = hyla_chat_parse(&chat, messages, where);
        if (st == HYLA_OK) {
            st = hyla_chat_encode(tok, &chat, 0, &ids, &mask, &n);
            hyla_chat_free(&chat);
            if (st != HYLA_OK) {
                char msg[512];
                snprintf(msg, sizeof msg, "%s", hyla_error_message());
                hyla_error_set(st, "%s: %s", where, msg);
            }
        }
        if (st == HYLA_OK)
            st = append(b, ids, mask, (int64_t)n, 0);
    }
    free(ids);
    free(mask);
    cJSON_Delete(root);
    return st;
}

int hyla_jsonl_read(const char *path, const hyla_tokenizer *tok, int32_t **ids, unsigned char **mask, int64_t *n_tokens,
                    int64_t **doc_start, int64_t *n_docs, uint64_t *hash)
{
    char *text;
    size_t len;
    HYLA_TRY(hyla_read_text_file(path, &text, &len));
    docs_buf b = {0};
    int st = HYLA_OK;
    size_t line_no = 1;
    for (size_t at = 0; st == HYLA_OK && at < len; line_no++) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len, s = at;
        while (s < end && (text[s] == ' ' || text[s] == '\t' || text[s] == '\r'))
            s++;
        if (s < end) {
            char where[4200];
            snprintf(where, sizeof where, "%s:%zu", path, line_no);
            st = parse_line(&b, tok, text + at, end - at, where);
        }
        at = end + 1;
    }
    if (hash)
        *hash = hyla_hash64(text, len);
    free(text);
    if (st == HYLA_OK && b.n_docs == 0)
        st = hyla_error_set(HYLA_ERR_FORMAT, "%s: no documents", path);
    if (st != HYLA_OK) {
        free(b.ids), free(b.mask), free(b.starts);
        return st;
    }
    *ids = b.ids, *mask = b.mask, *n_tokens = b.n, *doc_start = b.starts, *n_docs = b.n_docs;
    return HYLA_OK;
}

int hyla_data_open_jsonl(hyla_data *d, const char *path, const hyla_tokenizer *tok, int64_t vocab)
{
    memset(d, 0, sizeof *d);
    int32_t *ids;
    unsigned char *mask;
    int64_t n, *starts, docs;
    uint64_t hash;
    HYLA_TRY(hyla_jsonl_read(path, tok, &ids, &mask, &n, &starts, &docs, &hash));
    HYLA_TRY(hyla_data_set_documents(d, ids, mask, n, starts, docs, vocab, path));
    d->hash = hash;
    return HYLA_OK;
}
