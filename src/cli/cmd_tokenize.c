/* hyla tokenize: encode text with a Qwen tokenizer.json (ids to stdout, or a HYLATOK1 training
 * token file with --out), pre-tokenize a JSONL document file (--jsonl: a HYLATOK2 file with the
 * documents' boundaries and label masks), or decode ids back to text. */
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "io/fileio.h"
#include "io/tokenizer.h"
#include "train/data.h"

int hyla_cmd_tokenize(int argc, char **argv)
{
    const char *tok_path = NULL, *text = NULL, *file = NULL, *decode = NULL, *out = NULL, *jsonl = NULL;
    const hyla_opt opts[] = {
        {"--tokenizer", OPT_STRING, &tok_path, "FILE", "a Hugging Face tokenizer.json, or a .gguf file (its "
         "vocabulary) (required)", 0, 0},
        {"--text", OPT_STRING, &text, "TEXT", "encode this text", 0, 0},
        {"--file", OPT_STRING, &file, "PATH", "encode the contents of this file (e.g. a training corpus)", 0, 0},
        {"--out", OPT_STRING, &out, "FILE", "write the ids as a HYLATOK1 token file for hyla train --data", 0, 0},
        {"--decode", OPT_STRING, &decode, "IDS", "decode comma-separated ids to text", 0, 0},
        {"--jsonl", OPT_STRING, &jsonl, "FILE", "JSONL documents ({\"text\"} or {\"messages\"}) to a HYLATOK2 file "
         "(--out, required) with document boundaries and the assistant-only label mask", 0, 0},
        {0},
    };
    const hyla_command_spec spec = {"tokenize", "--tokenizer FILE (--text TEXT | --file PATH | --jsonl FILE | --decode IDS) [--out FILE]",
                                    "Encode text to token ids or decode ids to text.", opts, 0, 0, NULL};
    const char *pos[1];
    int npos, r = hyla_opts_parse(&spec, argc, argv, pos, &npos);
    if (r)
        return r < 0 ? 2 : 0;
    if (!tok_path || !!text + !!file + !!decode + !!jsonl != 1) {
        fprintf(stderr, "hyla tokenize: need --tokenizer and exactly one of --text, --file, --jsonl, --decode\n");
        return 2;
    }
    if (jsonl && !out) {
        fprintf(stderr, "hyla tokenize: --jsonl needs --out FILE (the HYLATOK2 document file)\n");
        return 2;
    }
    hyla_tokenizer *tok;
    if (hyla_tokenizer_load(&tok, tok_path))
        return hyla_cli_fail("tokenize");
    int rc = 0;
    if (jsonl) {
        int32_t *ids;
        unsigned char *mask;
        int64_t n, *starts, docs, targets = 0;
        if (hyla_jsonl_read(jsonl, tok, &ids, &mask, &n, &starts, &docs, NULL) ||
            hyla_data_write_documents(out, ids, mask, n, starts, docs, (int64_t)hyla_tokenizer_vocab_size(tok))) {
            rc = hyla_cli_fail("tokenize");
        } else {
            for (int64_t k = 0; k < docs; k++) /* a document's first token is context, never a label */
                for (int64_t i = starts[k] + 1; i < starts[k + 1]; i++)
                    targets += mask[i];
            printf("wrote %s: %lld documents, %lld tokens, %lld of them training targets\n", out, (long long)docs,
                   (long long)n, (long long)targets);
            free(ids), free(mask), free(starts);
        }
    } else if (decode) {
        int32_t *ids;
        int64_t n;
        char *s;
        size_t len;
        if (hyla_parse_int_list("--decode", decode, &ids, &n)) {
            hyla_tokenizer_free(tok);
            return 2;
        }
        if (hyla_tokenizer_decode(tok, ids, (size_t)n, &s, &len)) {
            rc = hyla_cli_fail("tokenize");
        } else {
            fwrite(s, 1, len, stdout);
            printf("\n");
            free(s);
        }
        free(ids);
    } else {
        char *buf = NULL;
        size_t len = 0;
        if (file && hyla_read_text_file(file, &buf, &len)) {
            hyla_tokenizer_free(tok);
            return hyla_cli_fail("tokenize");
        }
        const char *src = file ? buf : text;
        len = file ? len : strlen(text);
        int32_t *ids = NULL;
        size_t n = 0;
        if (hyla_tokenizer_encode(tok, src, len, &ids, &n)) {
            rc = hyla_cli_fail("tokenize");
        } else if (out) {
            if (hyla_data_write_tokens(out, ids, (int64_t)n, (int64_t)hyla_tokenizer_vocab_size(tok)))
                rc = hyla_cli_fail("tokenize");
            else
                printf("wrote %s: %zu tokens from %zu bytes\n", out, n, len);
        } else {
            for (size_t i = 0; i < n; i++)
                printf("%s%d", i ? "," : "", ids[i]);
            printf("\n");
        }
        free(ids);
        free(buf);
    }
    hyla_tokenizer_free(tok);
    return rc;
}
