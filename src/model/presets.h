/* Built-in model configurations (config.json text) for from-scratch models and benchmarks. */
#ifndef HYLA_MODEL_PRESETS_H
#define HYLA_MODEL_PRESETS_H

/* NULL if unknown. */
const char *hyla_preset_json(const char *name);
/* Comma-separated list of preset names, for help and error messages. */
const char *hyla_preset_names(void);

#endif
