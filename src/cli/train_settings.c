/* What a training run remembers in trainer_state.json ("run") and how --resume uses it. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/train_args.h"
#include "core/error.h"

typedef enum { S_INT, S_DOUBLE, S_STRING, S_FLAG } setting_kind;
typedef enum { APPLY, REFUSE } on_change;

typedef struct {
    const char *flag;
    setting_kind kind;
    size_t offset;     /* in train_args */
    on_change rule;
} setting;

#define AT(field) offsetof(train_args, field)
static const setting settings[] = {
    {"--steps", S_INT, AT(steps), APPLY},          {"--lr", S_DOUBLE, AT(lr), APPLY},
    {"--min-lr", S_DOUBLE, AT(min_lr), APPLY},     {"--warmup", S_INT, AT(warmup), APPLY},
    {"--schedule", S_STRING, AT(schedule), APPLY}, {"--decay-fraction", S_DOUBLE, AT(decay_fraction), APPLY},
    {"--weight-decay", S_DOUBLE, AT(wd), APPLY},   {"--clip", S_DOUBLE, AT(clip), APPLY},
    {"--beta1", S_DOUBLE, AT(beta1), APPLY},       {"--beta2", S_DOUBLE, AT(beta2), APPLY},
    {"--eps", S_DOUBLE, AT(eps), APPLY},           {"--remat", S_STRING, AT(remat), APPLY},
    {"--remat-unit", S_STRING, AT(unit), APPLY},
    {"--batch", S_INT, AT(batch), REFUSE},         {"--seq", S_INT, AT(seq), REFUSE},
    {"--seed", S_INT, AT(seed), REFUSE}, /* --accum: with the rank count (restore_accum) */
    {"--no-shuffle", S_FLAG, AT(no_shuffle), REFUSE}, {"--shuffle", S_FLAG, AT(shuffle), REFUSE},
    {"--pack", S_FLAG, AT(pack), REFUSE},
    {"--lora-rank", S_INT, AT(lora_rank), REFUSE}, {"--lora-alpha", S_DOUBLE, AT(lora_alpha), REFUSE},
    {"--lora-targets", S_STRING, AT(lora_targets), REFUSE}, {"--lora-dropout", S_DOUBLE, AT(lora_dropout), APPLY},
    {"--model", S_STRING, AT(model), APPLY}, /* LoRA runs: the frozen base (a moved copy may be given again) */
    {"--act-dtype", S_STRING, AT(dtypes.act), APPLY},
    {"--mtp-loss-weight", S_DOUBLE, AT(mtp_loss_weight), APPLY}, {"--mtp-only", S_FLAG, AT(mtp_only), APPLY},
};
#define N_SETTINGS (sizeof settings / sizeof *settings)

static void *field(train_args *a, const setting *s) { return (char *)a + s->offset; }

static void show(const train_args *a, const setting *s, char *out, size_t cap)
{
    const void *p = (const char *)a + s->offset;
    if (s->kind == S_INT)
        snprintf(out, cap, "%" PRId64, *(const int64_t *)p);
    else if (s->kind == S_DOUBLE)
        snprintf(out, cap, "%.9g", *(const double *)p);
    else if (s->kind == S_FLAG)
        snprintf(out, cap, "%s", *(const int *)p ? "on" : "off");
    else
        snprintf(out, cap, "%s", *(const char *const *)p ? *(const char *const *)p : "(none)");
}

static const char *data_kind(const train_args *a)
{
    return a->jsonl ? "jsonl" : a->data ? "tokens" : a->text ? "text" : "synthetic";
}

int train_settings_record(const train_args *a, const hyla_data *d, hyla_train_state *st)
{
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting *s = &settings[i];
        const void *p = (const char *)a + s->offset;
        const char *key = s->flag + 2;
        if (s->kind == S_INT)
            cJSON_AddNumberToObject(o, key, (double)*(const int64_t *)p);
        else if (s->kind == S_DOUBLE)
            cJSON_AddNumberToObject(o, key, *(const double *)p);
        else if (s->kind == S_FLAG)
            cJSON_AddBoolToObject(o, key, *(const int *)p);
        else if (*(const char *const *)p)
            cJSON_AddStringToObject(o, key, *(const char *const *)p);
    }
    cJSON_AddNumberToObject(o, "accum", (double)a->accum); /* per rank */
    cJSON_AddNumberToObject(o, "ranks", (double)a->ranks);
    cJSON *data = cJSON_AddObjectToObject(o, "data");
    char hash[24];
    snprintf(hash, sizeof hash, "%016" PRIx64, d->hash);
    cJSON_AddStringToObject(data, "kind", data_kind(a));
    cJSON_AddStringToObject(data, "path", d->source);
    cJSON_AddStringToObject(data, "content_hash", hash);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    int ok = text && strlen(text) < sizeof st->run;
    if (ok)
        snprintf(st->run, sizeof st->run, "%s", text);
    free(text);
    return ok ? HYLA_OK : hyla_error_set(HYLA_ERR_NOMEM, "the run's settings do not fit trainer_state.json's 'run'");
}

/* Take the stored value of s into a (is_equal: only compare). Returns 1 if it differs from a's value. */
static int restore_one(train_args *a, const setting *s, const cJSON *v, int compare_only, int slot)
{
    void *p = field(a, s);
    switch (s->kind) {
    case S_INT:
        if (!cJSON_IsNumber(v))
            return 0;
        if (compare_only)
            return *(int64_t *)p != (int64_t)v->valuedouble;
        *(int64_t *)p = (int64_t)v->valuedouble;
        return 0;
    case S_DOUBLE:
        if (!cJSON_IsNumber(v))
            return 0;
        if (compare_only)
            return *(double *)p != v->valuedouble;
        *(double *)p = v->valuedouble;
        return 0;
    case S_FLAG:
        if (!cJSON_IsBool(v))
            return 0;
        if (compare_only)
            return *(int *)p != cJSON_IsTrue(v);
        *(int *)p = cJSON_IsTrue(v);
        return 0;
    case S_STRING:
        if (!cJSON_IsString(v))
            return 0;
        if (compare_only)
            return !*(const char **)p || strcmp(*(const char **)p, v->valuestring);
        snprintf(a->restored[slot], sizeof a->restored[slot], "%s", v->valuestring);
        *(const char **)p = a->restored[slot];
        return 0;
    }
    return 0;
}

/* A resumed run keeps its step's micro-batch count (ranks x --accum), on any number of ranks. */
static int restore_accum(train_args *a, const hyla_command_spec *spec, const cJSON *o)
{
    const cJSON *acc = cJSON_GetObjectItemCaseSensitive(o, "accum"), *rk = cJSON_GetObjectItemCaseSensitive(o, "ranks");
    if (!cJSON_IsNumber(acc))
        return HYLA_OK;
    int64_t ranks = cJSON_IsNumber(rk) && rk->valuedouble >= 1 ? (int64_t)rk->valuedouble : 1;
    int64_t was = (int64_t)acc->valuedouble * ranks;
    if (hyla_opt_given(spec, "--accum")) {
        if (a->accum * a->ranks != was)
            return hyla_error_set(HYLA_ERR_ARG, "--resume %s: %lld rank(s) x --accum %lld = %lld micro-batches per step "
                                  "differs from the checkpoint's %lld (%lld rank(s) x %lld); a resumed run keeps its "
                                  "step (start a new run to change it)", a->resume, (long long)a->ranks,
                                  (long long)a->accum, (long long)(a->accum * a->ranks), (long long)was, (long long)ranks,
                                  (long long)(was / ranks));
        return HYLA_OK;
    }
    if (was % a->ranks)
        return hyla_error_set(HYLA_ERR_ARG, "--resume %s: the checkpoint's step of %lld micro-batches does not split "
                              "over %lld ranks", a->resume, (long long)was, (long long)a->ranks);
    a->accum = was / a->ranks;
    if (ranks != a->ranks)
        printf("resume: %lld rank(s) x --accum %lld (the checkpoint ran on %lld rank(s) x %lld)\n", (long long)a->ranks,
               (long long)a->accum, (long long)ranks, (long long)(was / ranks));
    return HYLA_OK;
}

int train_settings_restore(train_args *a, const hyla_command_spec *spec, const hyla_train_state *st)
{
    if (!st->run[0]) /* a checkpoint from before settings were recorded: flags as given */
        return HYLA_OK;
    cJSON *o = cJSON_Parse(st->run);
    if (!o)
        return hyla_error_set(HYLA_ERR_FORMAT, "--resume %s: trainer_state.json 'run' is not valid JSON", a->resume);
    int rc = HYLA_OK, slot = 0;
    for (size_t i = 0; rc == HYLA_OK && i < N_SETTINGS; i++) {
        const setting *s = &settings[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, s->flag + 2);
        if (!v)
            continue;
        int given = hyla_opt_given(spec, s->flag);
        if (!given) {
            restore_one(a, s, v, 0, s->kind == S_STRING ? slot++ : 0);
            continue;
        }
        if (!restore_one(a, s, v, 1, 0))
            continue;
        char now[256];
        show(a, s, now, sizeof now);
        char *was = cJSON_PrintUnformatted(v);
        if (s->rule == REFUSE)
            rc = hyla_error_set(HYLA_ERR_ARG, "--resume %s: %s %s differs from the checkpoint's %s; a resumed run keeps "
                                "%s (start a new run to change it)", a->resume, s->flag, now, was ? was : "?", s->flag);
        else
            printf("resume: %s %s (the checkpoint ran with %s)\n", s->flag, now, was ? was : "?");
        free(was);
    }
    if (rc == HYLA_OK)
        rc = restore_accum(a, spec, o);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(o, "data");
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(data, "kind"), *path = cJSON_GetObjectItemCaseSensitive(data, "path");
    int data_given = a->data || a->text || a->jsonl || a->synthetic;
    if (rc == HYLA_OK && !data_given && cJSON_IsString(kind) && cJSON_IsString(path)) { /* the same data again */
        snprintf(a->restored[7], sizeof a->restored[7], "%s", path->valuestring);
        const char *k = kind->valuestring;
        if (!strcmp(k, "jsonl"))
            a->jsonl = a->restored[7];
        else if (!strcmp(k, "tokens"))
            a->data = a->restored[7];
        else if (!strcmp(k, "text"))
            a->text = a->restored[7];
    }
    cJSON_Delete(o);
    return rc;
}

int train_settings_check_data(const train_args *a, const hyla_data *d, const hyla_train_state *st)
{
    cJSON *o = st->run[0] ? cJSON_Parse(st->run) : NULL;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(o, "data");
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(data, "kind");
    const cJSON *hash = cJSON_GetObjectItemCaseSensitive(data, "content_hash");
    int rc = HYLA_OK;
    char now[24];
    snprintf(now, sizeof now, "%016" PRIx64, d->hash);
    if (!o) { /* older checkpoints: the path as recorded */
        if (strcmp(st->data_source, d->source))
            rc = hyla_error_set(HYLA_ERR_ARG, "--resume %s: checkpoint was trained on '%s', not '%s'", a->resume,
                                st->data_source, d->source);
    } else if (cJSON_IsString(kind) && strcmp(kind->valuestring, data_kind(a))) {
        rc = hyla_error_set(HYLA_ERR_ARG, "--resume %s: the checkpoint was trained on %s data (%s), not %s", a->resume,
                            kind->valuestring, st->data_source, data_kind(a));
    } else if (cJSON_IsString(hash) && strcmp(hash->valuestring, now)) {
        rc = hyla_error_set(HYLA_ERR_ARG, "--resume %s: %s has other content (hash %s) than the data the checkpoint was "
                            "trained on (%s, hash %s)", a->resume, d->source, now, st->data_source, hash->valuestring);
    }
    cJSON_Delete(o);
    return rc;
}
