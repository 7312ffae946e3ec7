/* libFuzzer harness: a HYLAROU1 router-replay file -> hyla_routing_read against the
 * tiny-hybrid preset (10 MoE layers, 8 experts, top-2). On success every id must be in [-1, 8)
 * and no expert may repeat within a row. */
#include "fuzz_util.h"

#include "core/error.h"
#include "engine/routing.h"
#include "model/config.h"
#include "model/presets.h"

static hyla_config cfg;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (hyla_config_parse(&cfg, hyla_preset_json("tiny-hybrid"), "tiny-hybrid") != HYLA_OK) {
        fprintf(stderr, "fuzz_routing: %s\n", hyla_error_message());
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[PATH_MAX];
    if (!path[0])
        fuzz_join(path, sizeof path, fuzz_tmpdir("routing"), "routing.bin");
    fuzz_write_file(path, data, size);

    hyla_routing r;
    if (hyla_routing_read(path, &cfg, &r) == HYLA_OK) {
        if (r.n_layers != hyla_moe_layer_count(&cfg) || r.k != cfg.top_k || r.rows < 1 || !r.ids)
            abort();
        for (int64_t row = 0; row < r.n_layers * r.rows; row++) {
            const int32_t *e = r.ids + row * r.k;
            for (int64_t j = 0; j < r.k; j++) {
                if (e[j] < -1 || e[j] >= cfg.n_experts)
                    abort();
                for (int64_t i = 0; i < j; i++)
                    if (e[j] >= 0 && e[i] == e[j])
                        abort();
            }
        }
    }
    hyla_routing_free(&r);
    return 0;
}
