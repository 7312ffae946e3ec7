#include "io/chat.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static const char *const roles[] = {"system", "user", "assistant", "tool", "developer"};

void hyla_chat_free(hyla_chat *chat)
{
    for (size_t i = 0; i < chat->n; i++) {
        free(chat->msgs[i].role);
        free(chat->msgs[i].content);
    }
    free(chat->msgs);
    chat->msgs = NULL, chat->n = 0;
}

/* The text of a content field: a string, text parts concatenated, or "" for null. */
static char *content_text(const cJSON *content)
{
    if (cJSON_IsString(content))
        return strdup(content->valuestring);
    size_t len = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, content) len += strlen(cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring);
    char *s = malloc(len + 1), *o = s;
    if (!s)
        return NULL;
    cJSON_ArrayForEach(part, content) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t n = strlen(t);
        memcpy(o, t, n);
        o += n;
    }
    *o = '\0';
    return s;
}

int hyla_chat_parse(hyla_chat *chat, const cJSON *messages, const char *where)
{
    memset(chat, 0, sizeof *chat);
    if (!cJSON_IsArray(messages) || cJSON_GetArraySize(messages) == 0)
        return hyla_error_set(HYLA_ERR_ARG, "%s: 'messages' must be a non-empty array", where);
    size_t n = (size_t)cJSON_GetArraySize(messages), i = 0;
    if (!(chat->msgs = calloc(n, sizeof *chat->msgs)))
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", where);
    const cJSON *msg;
    cJSON_ArrayForEach(msg, messages) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        int known = 0;
        for (size_t r = 0; cJSON_IsString(role) && r < sizeof roles / sizeof *roles; r++)
            known |= !strcmp(role->valuestring, roles[r]);
        int st = HYLA_OK;
        if (!cJSON_IsObject(msg))
            st = hyla_error_set(HYLA_ERR_ARG, "%s: messages[%zu] is not an object", where, i);
        else if (!known)
            st = hyla_error_set(HYLA_ERR_ARG, "%s: messages[%zu].role %s%s%s is not one of system, user, assistant, tool, "
                                "developer", where, i, cJSON_IsString(role) ? "'" : "",
                                cJSON_IsString(role) ? role->valuestring : "(missing or not a string)",
                                cJSON_IsString(role) ? "'" : "");
        else if (cJSON_IsArray(content)) {
            const cJSON *part;
            cJSON_ArrayForEach(part, content) {
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
                if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") ||
                    !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(part, "text")))
                    st = hyla_error_set(HYLA_ERR_ARG, "%s: messages[%zu].content: only text parts "
                                        "({\"type\": \"text\", \"text\": ...}) are supported", where, i);
            }
        } else if (!cJSON_IsString(content) && !(cJSON_IsNull(content) && !strcmp(role->valuestring, "assistant")))
            st = hyla_error_set(HYLA_ERR_ARG, "%s: messages[%zu].content must be a string or an array of text parts",
                                where, i);
        if (st == HYLA_OK) {
            chat->msgs[i].role = strdup(role->valuestring);
            chat->msgs[i].content = cJSON_IsNull(content) ? strdup("") : content_text(content);
            chat->n = i + 1;
            if (!chat->msgs[i].role || !chat->msgs[i].content)
                st = hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", where);
        }
        if (st != HYLA_OK) {
            chat->n = i + 1;
            hyla_chat_free(chat);
            return st;
        }
        i++;
    }
    return HYLA_OK;
}

typedef struct {
    int32_t *ids;
    unsigned char *mask;
    size_t n, cap;
} id_buf;

static int push(id_buf *b, int32_t id, unsigned char m)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        int32_t *ids = realloc(b->ids, cap * sizeof *ids);
        if (ids)
            b->ids = ids;
        unsigned char *mask = ids ? realloc(b->mask, cap) : NULL;
        if (!mask)
            return hyla_error_set(HYLA_ERR_NOMEM, "chat: out of memory");
        b->mask = mask, b->cap = cap;
    }
    b->ids[b->n] = id, b->mask[b->n] = m;
    b->n++;
    return HYLA_OK;
}

/* Encode text (no added token inside it matters: encode splits there as the whole string would);
 * tokens ending past byte `labelled_from` get mask m. */
static int push_text(id_buf *b, const hyla_tokenizer *tok, const char *text, size_t len, size_t labelled_from,
                     unsigned char m)
{
    int32_t *ids;
    size_t n;
    HYLA_TRY(hyla_tokenizer_encode(tok, text, len, &ids, &n));
    size_t end = 0;
    int st = HYLA_OK;
    for (size_t i = 0; st == HYLA_OK && i < n; i++) {
        char *bytes = NULL;
        size_t nb = 0;
        if (m && (st = hyla_tokenizer_decode(tok, ids + i, 1, &bytes, &nb)) != HYLA_OK)
            break;
        free(bytes);
        end += nb;
        st = push(b, ids[i], m && end > labelled_from);
    }
    free(ids);
    return st;
}

int hyla_chat_encode(const hyla_tokenizer *tok, const hyla_chat *chat, int add_generation_prompt, int32_t **ids,
                     unsigned char **mask, size_t *n)
{
    int32_t start = hyla_tokenizer_token_id(tok, "<|im_start|>"), end = hyla_tokenizer_token_id(tok, "<|im_end|>");
    *ids = NULL, *n = 0;
    if (mask)
        *mask = NULL;
    if (start < 0 || end < 0)
        return hyla_error_set(HYLA_ERR_ARG, "chat: the tokenizer has no <|im_start|> / <|im_end|> tokens");
    id_buf b = {0};
    int st = HYLA_OK;
    for (size_t i = 0; st == HYLA_OK && i <= chat->n; i++) {
        int last = i == chat->n;
        if (last && !add_generation_prompt)
            break;
        const char *role = last ? "assistant" : chat->msgs[i].role, *content = last ? "" : chat->msgs[i].content;
        unsigned char m = !last && !strcmp(role, "assistant");
        size_t head = strlen(role) + 1, len = head + strlen(content);
        char *span = malloc(len + 1);
        if (!span) {
            st = hyla_error_set(HYLA_ERR_NOMEM, "chat: out of memory");
            break;
        }
        snprintf(span, len + 1, "%s\n%s", role, content);
        st = push(&b, start, 0);
        if (st == HYLA_OK)
            st = push_text(&b, tok, span, len, head, m);
        free(span);
        if (st == HYLA_OK && !last)
            st = push(&b, end, m);
        if (st == HYLA_OK && !last)
            st = push_text(&b, tok, "\n", 1, 0, 0);
    }
    if (st != HYLA_OK) {
        free(b.ids);
        free(b.mask);
        return st;
    }
    *ids = b.ids, *n = b.n;
    if (mask)
        *mask = b.mask;
    else
        free(b.mask);
    return HYLA_OK;
}
