#include "model/checkpoint_names.h"


static const char *const ck_names[HYLA_CK__COUNT] = {
    "decoder_layer_input", "ffn_input", "gdn_in_proj", "gdn_conv", "gdn_core", "gdn_norm", "out_proj",
    "query_proj", "key_proj", "value_proj", "context", "attention_out", "router_logits",
    "moe_mlpwi_0", "moe_mlpwi_1", "moe_mlpwo", "mlpwi_0", "mlpwi_1", "mlpwo",
};

const char *hyla_ckpt_name_str(hyla_ckpt_name c) { return c < HYLA_CK__COUNT ? ck_names[c] : "internal"; }
