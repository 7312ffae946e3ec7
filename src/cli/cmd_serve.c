/* hyla serve DIR: the OpenAI-compatible HTTP server (src/serve/serve.h). */
#include "cli/commands.h"
#include "cli/dtype_flags.h"
#include "cli/options.h"
#include "serve/serve.h"

int hyla_cmd_serve(int argc, char **argv)
{
    const char *host = "127.0.0.1", *api_key = NULL, *name = NULL, *adapter = NULL;
    int64_t port = 8080, parallel = 4, ctx = 4096, max_body = 1 << 20, threads = 0, draft = 0;
    hyla_cli_dtypes dt = {0};
    const hyla_opt opts[] = {
        {"--host", OPT_STRING, &host, "ADDR", "IPv4 address to bind (default 127.0.0.1: this machine only)", 0, 0},
        {"--port", OPT_INT, &port, "N", "TCP port (default 8080; 0 = any free port, printed)", 0, 65535},
        {"--parallel", OPT_INT, &parallel, "K", "sequences decoding together in one batch (default 4)", 1, 256},
        {"--ctx", OPT_INT, &ctx, "N", "tokens per sequence, prompt + completion (default 4096, at most the model's)", 2, 1 << 24},
        {"--api-key", OPT_STRING, &api_key, "KEY", "require 'Authorization: Bearer KEY' on every request", 0, 0},
        {"--max-body", OPT_INT, &max_body, "BYTES", "largest request body (default 1 MiB; larger: 413)", 64, 1 << 30},
        {"--model-name", OPT_STRING, &name, "NAME", "the model id clients use (default: DIR's base name)", 0, 0},
        {"--adapter", OPT_STRING, &adapter, "DIR", "a LoRA adapter (PEFT format), merged into the weights at load", 0, 0},
        {"--threads", OPT_INT, &threads, "N", "OpenMP threads (default: all cores)", 0, 4096},
        {"--draft", OPT_INT, &draft, "N", "speculative decoding per slot: draft N tokens per round with the MTP head (1..8; 0 = off)",
         0, 8},
        HYLA_OPT_ACT_DTYPE(dt),
        HYLA_OPT_PARAM_DTYPE(dt),
        {0},
    };
    const hyla_command_spec spec = {"serve", "DIR [options]",
                                    "Serve DIR over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, "
                                    "/v1/models, /health) with continuous batching.",
                                    opts, 1, 1, NULL};
    const char *pos[1];
    int npos, r = hyla_opts_parse(&spec, argc, argv, pos, &npos);
    if (r)
        return r < 0 ? 2 : 0;
    if (api_key && !api_key[0]) {
        fprintf(stderr, "hyla serve: --api-key must not be empty\n");
        return 2;
    }
    int bf16_compute, bf16_weights;
    if (hyla_cli_precision(&dt, 0, &bf16_compute, &bf16_weights)) {
        hyla_cli_fail("serve");
        return 2;
    }
    hyla_cli_set_threads(threads);
    serve_options o = {pos[0], host, (int)port, parallel, ctx, api_key, (size_t)max_body, name, adapter, bf16_compute,
                       bf16_weights, (int)draft};
    return serve_run(&o) ? hyla_cli_fail("serve") : 0;
}
