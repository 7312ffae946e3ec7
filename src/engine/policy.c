/* Remat policies: MaxText's presets and custom lists over the checkpoint names. */
#include "engine/policy.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"

#define BIT(x) (1u << (x))
/* MaxText's lists, mapped to hyla's names: qkv_proj ~ query/key/value_proj and gdn_in_proj;
 * MLP names cover the shared expert / dense MLP and their routed-expert moe_* twins; GDN's
 * delta-rule output plays the role of attention's context. */
#define QKV (BIT(HYLA_CK_QUERY_PROJ) | BIT(HYLA_CK_KEY_PROJ) | BIT(HYLA_CK_VALUE_PROJ) | BIT(HYLA_CK_GDN_IN_PROJ))
#define MLPWI (BIT(HYLA_CK_MLPWI_0) | BIT(HYLA_CK_MLPWI_1) | BIT(HYLA_CK_MOE_MLPWI_0) | BIT(HYLA_CK_MOE_MLPWI_1))
#define MLPWO (BIT(HYLA_CK_MLPWO) | BIT(HYLA_CK_MOE_MLPWO))
#define CONTEXT (BIT(HYLA_CK_CONTEXT) | BIT(HYLA_CK_GDN_CORE))
#define INPUT BIT(HYLA_CK_DECODER_LAYER_INPUT)

typedef struct {
    const char *name;
    unsigned device, offload;
    int keep_internal;
} preset;

static const preset presets[] = {
    {"none", ~0u, 0, 1},
    {"full", 0, 0, 0}, /* only the remat units' inputs */
    {"minimal", INPUT | QKV | BIT(HYLA_CK_OUT_PROJ) | MLPWI | MLPWO, 0, 0},
    {"minimal_with_context", INPUT | QKV | BIT(HYLA_CK_OUT_PROJ) | MLPWI | MLPWO | CONTEXT, 0, 0},
    {"save_qkv_proj", INPUT | QKV, 0, 0},
    {"save_out_proj", INPUT | BIT(HYLA_CK_OUT_PROJ), 0, 0},
    {"save_dot_except_mlp", INPUT | QKV | BIT(HYLA_CK_OUT_PROJ), 0, 0},
    {"save_dot_except_mlpwi", INPUT | QKV | BIT(HYLA_CK_OUT_PROJ) | MLPWO, 0, 0},
    {"qkv_proj_offloaded", INPUT, QKV, 0},
    {"minimal_offloaded", INPUT, QKV | BIT(HYLA_CK_OUT_PROJ) | MLPWI | MLPWO, 0},
};

const char *hyla_policy_presets(void)
{
    return "none, full, minimal, minimal_with_context, save_qkv_proj, save_out_proj, save_dot_except_mlp, "
           "save_dot_except_mlpwi, qkv_proj_offloaded, minimal_offloaded, custom:NAME=device|remat|offload,...";
}

static int parse_custom(hyla_policy *p, const char *list)
{
    for (int c = 0; c < HYLA_CK__COUNT; c++)
        p->where[c] = HYLA_KEEP_REMAT;
    p->where[HYLA_CK_DECODER_LAYER_INPUT] = HYLA_KEEP_DEVICE;
    const char *s = list;
    while (*s) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        const char *eq = memchr(s, '=', len);
        if (!eq)
            return hyla_error_set(HYLA_ERR_ARG, "custom policy: '%.*s' is not NAME=device|remat|offload", (int)len, s);
        size_t nlen = (size_t)(eq - s), vlen = len - nlen - 1;
        int found = -1;
        for (int c = 0; c < HYLA_CK__COUNT; c++)
            if (strlen(hyla_ckpt_name_str((hyla_ckpt_name)c)) == nlen && !strncmp(hyla_ckpt_name_str((hyla_ckpt_name)c), s, nlen))
                found = c;
        if (found < 0)
            return hyla_error_set(HYLA_ERR_ARG, "custom policy: unknown checkpoint name '%.*s'", (int)nlen, s);
        const char *v = eq + 1;
        if (vlen == 6 && !strncmp(v, "device", 6))
            p->where[found] = HYLA_KEEP_DEVICE;
        else if (vlen == 5 && !strncmp(v, "remat", 5))
            p->where[found] = HYLA_KEEP_REMAT;
        else if (vlen == 7 && !strncmp(v, "offload", 7))
            p->where[found] = HYLA_KEEP_OFFLOAD;
        else
            return hyla_error_set(HYLA_ERR_ARG, "custom policy: '%.*s' must be device, remat or offload", (int)len, s);
        s = comma ? comma + 1 : s + len;
    }
    return HYLA_OK;
}

int hyla_policy_parse(hyla_policy *p, const char *text)
{
    memset(p, 0, sizeof *p);
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (!strcmp(text, presets[i].name)) {
            snprintf(p->name, sizeof p->name, "%s", presets[i].name);
            for (int c = 0; c < HYLA_CK__COUNT; c++)
                p->where[c] = (presets[i].offload & BIT(c)) ? HYLA_KEEP_OFFLOAD
                            : (presets[i].device & BIT(c)) ? HYLA_KEEP_DEVICE : HYLA_KEEP_REMAT;
            p->keep_internal = presets[i].keep_internal;
            return HYLA_OK;
        }
    const char *list = text;
    if (!strncmp(text, "custom:", 7))
        list = text + 7;
    else if (!strchr(text, '='))
        return hyla_error_set(HYLA_ERR_ARG, "unknown remat policy '%s' (known: %s)", text, hyla_policy_presets());
    snprintf(p->name, sizeof p->name, "custom");
    return parse_custom(p, list);
}

void hyla_policy_format(const hyla_policy *p, char *buf, unsigned long cap)
{
    static const char *const where[] = {"remat", "device", "offload"};
    size_t o = 0;
    buf[0] = '\0';
    for (int c = 0; c < HYLA_CK__COUNT && o < cap; c++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s=%s", c ? "," : "", hyla_ckpt_name_str((hyla_ckpt_name)c), where[p->where[c]]);
}
