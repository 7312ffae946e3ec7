/* Chat conversations in the ChatML format of the Qwen chat templates:
 *
 *   <|im_start|>ROLE\nCONTENT<|im_end|>\n   for every message, then, to ask for a reply,
 *   <|im_start|>assistant\n
 *
 * Encoding goes span by span between the added tokens <|im_start|> and <|im_end|> (which is
 * exactly how encoding the rendered text splits it), so the ids equal those of the whole
 * rendered string, and the assistant mask is exact: mask[i] = 1 for the tokens of an assistant
 * message's content (a token straddling "assistant\n" and the content counts as content) and
 * the <|im_end|> that closes it; 0 for everything else (headers, other roles, newlines). */
#ifndef HYLA_IO_CHAT_H
#define HYLA_IO_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "io/tokenizer.h"

typedef struct {
    char *role;     /* system | user | assistant | tool | developer */
    char *content;  /* text (text parts concatenated) */
} hyla_chat_message;

typedef struct {
    hyla_chat_message *msgs;
    size_t n;
} hyla_chat;

struct cJSON;
/* Parse an OpenAI-style "messages" array: [{"role": ..., "content": "..." | [{"type": "text",
 * "text": ...}, ...] | null (assistant only)}, ...]. On error the message names messages[i] and
 * the field; `where` prefixes it (a file and line, or "request"). */
int hyla_chat_parse(hyla_chat *chat, const struct cJSON *messages, const char *where);
void hyla_chat_free(hyla_chat *chat);

/* Encode `chat` (plus the assistant header when add_generation_prompt). *ids and *mask (may be
 * NULL) are malloc'd, *n long. The tokenizer must have <|im_start|> and <|im_end|>. */
int hyla_chat_encode(const hyla_tokenizer *tok, const hyla_chat *chat, int add_generation_prompt, int32_t **ids,
                     unsigned char **mask, size_t *n);

#endif
