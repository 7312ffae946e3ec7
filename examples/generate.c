/* A program using hyla as a library: load a model, tokenize a prompt (or take token ids), generate
 * greedily or with sampling, print the continuation.
 *
 *   cc generate.c $(pkg-config --cflags --libs hyla) -o generate
 *   ./generate MODEL_DIR "Once upon a time" [MAX_NEW [TEMPERATURE]]
 *   ./generate MODEL_DIR --ids 1,2,3 [MAX_NEW [TEMPERATURE]]   (models without tokenizer.json) */
#include <hyla.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_ids(const char *s, int32_t **ids, int64_t *n)
{
    *n = 0;
    *ids = malloc((strlen(s) / 2 + 1) * sizeof **ids);
    if (!*ids)
        return -1;
    for (char *end; *s; s = *end ? end + 1 : end) {
        long v = strtol(s, &end, 10);
        if (end == s || (*end && *end != ','))
            return -1;
        (*ids)[(*n)++] = (int32_t)v;
    }
    return *n > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL_DIR (PROMPT | --ids 1,2,3) [MAX_NEW [TEMPERATURE]]\n", argv[0]);
        return 2;
    }
    int ids_mode = !strcmp(argv[2], "--ids"), a = ids_mode ? 4 : 3;
    if (ids_mode && argc < 4) {
        fprintf(stderr, "%s: --ids needs a list\n", argv[0]);
        return 2;
    }
    hyla_sampling_settings s = {0.0, 0, 1.0, 1, 32};
    if (argc > a)
        s.max_new = atoll(argv[a]);
    if (argc > a + 1)
        s.temperature = atof(argv[a + 1]);
    hyla_engine *e;
    if (hyla_open(argv[1], &e)) {
        fprintf(stderr, "%s: %s\n", argv[0], hyla_last_error());
        return 1;
    }
    int32_t *prompt = NULL, *out = malloc((size_t)(s.max_new > 0 ? s.max_new : 1) * sizeof *out);
    int64_t n_prompt = 0, n_out = 0;
    int rc = 1;
    if (ids_mode ? parse_ids(argv[3], &prompt, &n_prompt) != 0
                 : hyla_tokenize(e, argv[2], strlen(argv[2]), &prompt, &n_prompt) != 0) {
        fprintf(stderr, "%s: bad prompt: %s\n", argv[0], ids_mode ? "not a list of token ids" : hyla_last_error());
    } else if (!out || hyla_generate_tokens(e, prompt, n_prompt, &s, out, &n_out) != 0) {
        fprintf(stderr, "%s: %s\n", argv[0], hyla_last_error());
    } else {
        printf("tokens:");
        for (int64_t i = 0; i < n_out; i++)
            printf("%s%d", i ? "," : " ", out[i]);
        printf("\n");
        char *text = NULL;
        size_t len = 0;
        if (hyla_has_tokenizer(e) && hyla_detokenize(e, out, n_out, &text, &len) == 0)
            printf("text: %s%.*s\n", ids_mode ? "" : argv[2], (int)len, text);
        else if (hyla_has_tokenizer(e)) /* e.g. ids the model knows but its tokenizer does not */
            printf("text: (not decodable: %s)\n", hyla_last_error());
        hyla_free(text);
        rc = 0;
    }
    if (ids_mode)
        free(prompt);
    else
        hyla_free(prompt);
    free(out);
    hyla_close(e);
    return rc;
}
