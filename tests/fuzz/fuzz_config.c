/* libFuzzer harness: config.json text -> hyla_config_parse; on success, when the sizes are
 * small, the block schedule and the parameter table (per layer and per HF tensor, no weights).
 * Huge sizes (a known, separately tracked issue) are parsed but not built. */
#include "fuzz_util.h"

#include "core/error.h"
#include "model/config.h"
#include "model/model.h"
#include "model/params.h"
#include "model/schedule.h"

#define SMALL ((int64_t)1 << 16)

static int small_enough(const hyla_config *c)
{
    const int64_t dims[] = {c->vocab, c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
                            c->lin_k_heads, c->lin_v_heads, c->lin_k_dim, c->lin_v_dim, c->conv_kernel,
                            c->n_experts, c->top_k, c->moe_inter, c->shared_inter, c->inter};
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++)
        if (dims[i] < 0 || dims[i] > SMALL)
            return 0;
    /* per-expert HF tensors: 3 per expert and layer */
    return c->n_layers * (c->n_experts + 1) <= SMALL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    static hyla_config cfg; /* ~5 KB: keep it off the stack */
    static hyla_schedule sched;
    int rc = hyla_config_parse(&cfg, text, "fuzz.json");
    free(text);
    if (rc != HYLA_OK || !small_enough(&cfg))
        return 0;

    hyla_schedule_build(&sched, &cfg);
    char buf[256];
    for (int b = 0; b < sched.n_blocks; b++)
        hyla_schedule_describe_block(&sched, &cfg, b, buf, sizeof buf);

    hyla_layout lay;
    hyla_default_layout(&cfg, &lay);
    for (int variant = 0; variant < 2; variant++) {
        if (variant) { /* the other layouts */
            lay.gdn_grouped = !lay.gdn_grouped;
            lay.experts_fused = !lay.experts_fused;
        }
        hyla_param_table t;
        if (hyla_params_build(&t, &cfg, &lay) != HYLA_OK)
            continue;
        hyla_param_counts pc;
        hyla_params_count(&t, &pc);
        for (size_t i = 0; i < t.n_hf; i++) {
            const hyla_hf_tensor *ht = &t.hf[i];
            if (ht->rows <= 0)
                continue;
            int param;
            int64_t row;
            hyla_hf_row_dest(&t, ht, ht->rows - 1, &param, &row);
            if (param < 0 || param >= t.n_params)
                abort(); /* every HF row must land in a parameter */
        }
        hyla_params_free(&t);
    }
    return 0;
}
