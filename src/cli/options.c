#include "cli/options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void hyla_opts_usage(FILE *f, const hyla_command_spec *spec)
{
    fprintf(f, "usage: hyla %s %s\n%s\n", spec->name, spec->synopsis, spec->summary);
    if (spec->opts[0].name)
        fprintf(f, "\noptions:\n");
    for (const hyla_opt *o = spec->opts; o->name; o++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
        fprintf(f, "  %-24s %s\n", left, o->help);
    }
    fprintf(f, "  %-24s %s\n", "--help", "show this help");
}

static int set_value(const hyla_command_spec *spec, const hyla_opt *o, const char *v)
{
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case OPT_INT: {
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end || x < o->min || x > o->max) {
            fprintf(stderr, "hyla %s: %s expects an integer in [%lld, %lld], got '%s'\n", spec->name, o->name,
                    (long long)o->min, (long long)o->max, v);
            return -1;
        }
        *(int64_t *)o->dst = x;
        return 0;
    }
    case OPT_DOUBLE: {
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x)) {
            fprintf(stderr, "hyla %s: %s expects a number, got '%s'\n", spec->name, o->name, v);
            return -1;
        }
        *(double *)o->dst = x;
        return 0;
    }
    case OPT_STRING:
        *(const char **)o->dst = v;
        return 0;
    case OPT_FLAG:
        break;
    }
    return -1;
}

int hyla_opts_parse(const hyla_command_spec *spec, int argc, char **argv, const char **pos, int *n_pos)
{
    *n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            hyla_opts_usage(stdout, spec);
            return 1;
        }
        if (a[0] == '-' && a[1] == '-') {
            const char *eq = strchr(a, '=');
            size_t len = eq ? (size_t)(eq - a) : strlen(a);
            const hyla_opt *o = spec->opts;
            while (o->name && !(strlen(o->name) == len && !strncmp(o->name, a, len)))
                o++;
            if (!o->name) {
                fprintf(stderr, "hyla %s: unknown option '%.*s' (see hyla %s --help)\n", spec->name, (int)len, a, spec->name);
                return -1;
            }
            if (spec->given)
                spec->given[o - spec->opts] = 1;
            if (o->kind == OPT_FLAG) {
                if (eq) {
                    fprintf(stderr, "hyla %s: %s takes no value\n", spec->name, o->name);
                    return -1;
                }
                *(int *)o->dst = 1;
                continue;
            }
            const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v) {
                fprintf(stderr, "hyla %s: %s needs a value (%s)\n", spec->name, o->name, o->metavar);
                return -1;
            }
            if (set_value(spec, o, v))
                return -1;
            continue;
        }
        if (*n_pos >= spec->max_positional) {
            fprintf(stderr, "hyla %s: unexpected argument '%s' (see hyla %s --help)\n", spec->name, a, spec->name);
            return -1;
        }
        pos[(*n_pos)++] = a;
    }
    if (*n_pos < spec->min_positional) {
        fprintf(stderr, "hyla %s: missing argument\n", spec->name);
        hyla_opts_usage(stderr, spec);
        return -1;
    }
    return 0;
}

int hyla_opt_given(const hyla_command_spec *spec, const char *name)
{
    for (const hyla_opt *o = spec->opts; spec->given && o->name; o++)
        if (!strcmp(o->name, name))
            return spec->given[o - spec->opts];
    return 0;
}

int hyla_parse_int_list(const char *flag, const char *text, int32_t **out, int64_t *count)
{
    int64_t cap = 16, n = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    const char *p = text;
    if (!v)
        return -1;
    while (*p) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (errno || end == p || (*end && *end != ',') || x < INT32_MIN || x > INT32_MAX) {
            fprintf(stderr, "hyla: %s: bad integer list '%s' (expected e.g. 1,2,3)\n", flag, text);
            free(v);
            return -1;
        }
        if (n == cap) {
            cap *= 2;
            int32_t *nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[n++] = (int32_t)x;
        p = *end ? end + 1 : end;
        if (*end == ',' && !*p) {
            fprintf(stderr, "hyla: %s: trailing comma in '%s'\n", flag, text);
            free(v);
            return -1;
        }
    }
    if (n == 0) {
        fprintf(stderr, "hyla: %s: empty list\n", flag);
        free(v);
        return -1;
    }
    *out = v;
    *count = n;
    return 0;
}

int hyla_parse_dtype_flag(const char *cmd, const char *flag, const char *text, hyla_dtype *out)
{
    static const char *const names[] = {"f32", "bf16", "f16"};
    static const hyla_dtype dts[] = {HYLA_DT_F32, HYLA_DT_BF16, HYLA_DT_F16};
    for (int i = 0; i < 3; i++)
        if (!strcmp(text, names[i])) {
            *out = dts[i];
            return 0;
        }
    fprintf(stderr, "hyla %s: %s must be f32, bf16 or f16, got '%s'\n", cmd, flag, text);
    return -1;
}
