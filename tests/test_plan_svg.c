/* hyla_plan_write_svg on a hand-built plan: the file is one well-formed SVG document (checked
 * by a small XML scanner: balanced elements, quoted attributes, escaped text), names every
 * checkpoint with bytes and none without, escapes the title, survives an empty plan, and an
 * unwritable path is an HYLA_ERR_IO error naming it.
 *
 * On a real model (argv[1]: the oracle cases), with an offloading policy and without: the plan
 * picture has a host tier exactly when the plan has host bytes; a measured step
 * (hyla_executor_measure) samples after every op the very points of the plan's timeline, and
 * its device and host bytes equal the plan's byte for byte (both fp32, the same allocation
 * sequence); the measured picture is well-formed and says the prediction was exact. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/error.h"
#include "io/fileio.h"
#include "engine/policy.h"
#include "engine/host_store.h"
#include "engine/plan.h"
#include "engine/plan_svg.h"

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *q = strstr(s, needle); q; q = strstr(q + 1, needle))
        n++;
    return n;
}

/* Opening <g> tags: "<g>" or "<g " (not <g... of another name). */
static int count_g_open(const char *s)
{
    int n = 0;
    for (const char *q = strstr(s, "<g"); q; q = strstr(q + 1, "<g"))
        if (q[2] == '>' || q[2] == ' ' || q[2] == '\n')
            n++;
    return n;
}

static int name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == ':' || c == '.'; }

static int entity_ok(const char *q) /* q at '&' */
{
    static const char *ents[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
    for (int i = 0; i < 5; i++)
        if (!strncmp(q, ents[i], strlen(ents[i])))
            return 1;
    if (q[1] == '#') {
        const char *e = q + 2;
        while (*e && *e != ';' && e - q < 12)
            e++;
        return *e == ';' && e > q + 2;
    }
    return 0;
}

/* Well-formedness, enough for what the writer emits: one root element, every element closed in
 * order, attributes quoted, no raw '<' or bare '&' in text or attribute values. Returns NULL or
 * what is wrong. */
static const char *xml_check(const char *s)
{
    static char why[160];
    char stack[64][32];
    int depth = 0, roots = 0;
    const char *q = s;
    while (*q) {
        if (*q == '&') {
            if (!entity_ok(q))
                return snprintf(why, sizeof why, "bare '&' at offset %ld", (long)(q - s)), why;
            q++;
            continue;
        }
        if (*q != '<') {
            q++;
            continue;
        }
        if (!strncmp(q, "<!--", 4)) {
            const char *e = strstr(q, "-->");
            if (!e)
                return "unterminated comment";
            q = e + 3;
            continue;
        }
        if (!strncmp(q, "<?", 2)) {
            const char *e = strstr(q, "?>");
            if (!e)
                return "unterminated processing instruction";
            q = e + 2;
            continue;
        }
        int closing = q[1] == '/';
        const char *n0 = q + 1 + closing, *n1 = n0;
        while (name_char(*n1))
            n1++;
        if (n1 == n0 || n1 - n0 >= 32)
            return snprintf(why, sizeof why, "bad tag name at offset %ld", (long)(q - s)), why;
        char name[32];
        memcpy(name, n0, (size_t)(n1 - n0));
        name[n1 - n0] = 0;
        const char *a = n1;
        if (closing) {
            while (*a == ' ' || *a == '\n')
                a++;
            if (*a != '>')
                return snprintf(why, sizeof why, "bad closing tag </%s>", name), why;
            if (depth == 0 || strcmp(stack[depth - 1], name))
                return snprintf(why, sizeof why, "</%s> closes <%s>", name, depth ? stack[depth - 1] : "(nothing)"), why;
            depth--;
            q = a + 1;
            continue;
        }
        /* attributes: name="value" */
        for (;;) {
            while (*a == ' ' || *a == '\n' || *a == '\t')
                a++;
            if (*a == '>' || (a[0] == '/' && a[1] == '>'))
                break;
            const char *an = a;
            while (name_char(*a))
                a++;
            if (a == an || *a != '=' || (a[1] != '"' && a[1] != '\''))
                return snprintf(why, sizeof why, "bad attribute in <%s> at offset %ld", name, (long)(an - s)), why;
            char quote = a[1];
            a += 2;
            while (*a && *a != quote) {
                if (*a == '<' || (*a == '&' && !entity_ok(a)))
                    return snprintf(why, sizeof why, "unescaped character in an attribute of <%s>", name), why;
                a++;
            }
            if (!*a)
                return "unterminated attribute";
            a++;
        }
        if (depth == 0 && ++roots > 1)
            return "more than one root element";
        if (*a == '/') {
            q = a + 2;
        } else {
            if (depth == 64)
                return "nesting too deep";
            strcpy(stack[depth++], name);
            q = a + 1;
        }
    }
    if (depth)
        return snprintf(why, sizeof why, "<%s> never closed", stack[depth - 1]), why;
    return roots == 1 ? NULL : "no root element";
}

static char *read_all(const char *path)
{
    char *t = NULL;
    size_t n = 0;
    return hyla_read_text_file(path, &t, &n) ? NULL : t;
}

static void check_document(const char *what, const char *t)
{
    size_t n = strlen(t);
    CHECK(!strncmp(t, "<svg", 4), "%s: does not start with <svg", what);
    CHECK(n > 7 && !strcmp(t + n - 7, "</svg>\n"), "%s: does not end with </svg>\\n", what);
    CHECK(count_g_open(t) == count(t, "</g>"), "%s: %d <g> opened, %d closed", what, count_g_open(t), count(t, "</g>"));
    const char *why = xml_check(t);
    CHECK(!why, "%s: not well-formed XML: %s", what, why ? why : "");
    CHECK(!strstr(t, "http://") || strstr(t, "xmlns=\"http://www.w3.org/2000/svg\""), "%s: refers outside itself", what);
    CHECK(!strstr(t, "<script") && !strstr(t, "@import") && !strstr(t, "href="), "%s: not self-contained", what);
    CHECK(!strstr(t, "nan") && !strstr(t, "inf"), "%s: a number printed as nan/inf", what);
}

/* Run one real step of `ex` with measurement on (and a store when the policy offloads). */
static int measured_step(hyla_executor *ex, const hyla_model *m, int64_t B, int64_t T, hyla_host_store **store)
{
    int rc = hyla_executor_measure(ex);
    if (rc == HYLA_OK && ex->host_bytes && (rc = hyla_host_store_open(store, NULL, 0)) == HYLA_OK)
        rc = hyla_executor_attach_store(ex, *store);
    int32_t *tokens = malloc((size_t)(B * T) * sizeof *tokens);
    float *grads = calloc(m->table.total_floats, sizeof(float));
    for (int64_t t = 0; tokens && t < B * T; t++)
        tokens[t] = (int32_t)((t * 37 + 5) % m->cfg.vocab);
    hyla_step_loss loss;
    if (rc == HYLA_OK)
        rc = tokens && grads ? hyla_executor_step(ex, tokens, NULL, grads, 0.01f, 0.001f, &loss) : HYLA_ERR_NOMEM;
    free(tokens);
    free(grads);
    return rc;
}

/* The plan picture and a measured step's picture of `policy` on the case model `dir`. */
static void real_model(const char *dir, const char *policy, hyla_remat_unit unit, int64_t B, int64_t T)
{
    hyla_model m;
    if (hyla_model_load(&m, dir)) {
        CHECK(0, "%s: %s", dir, hyla_error_message());
        return;
    }
    hyla_plan_config pc;
    memset(&pc, 0, sizeof pc);
    CHECK(hyla_policy_parse(&pc.policy, policy) == HYLA_OK, "policy %s: %s", policy, hyla_error_message());
    pc.unit = unit, pc.batch = B, pc.seq = T, pc.devices = 1;
    pc.param_bytes = pc.grad_bytes = pc.opt_bytes = pc.act_bytes = 4;
    hyla_plan plan;
    if (hyla_plan_compute(&m, &pc, &plan) != HYLA_OK) {
        CHECK(0, "plan %s: %s", policy, hyla_error_message());
        hyla_model_free(&m);
        return;
    }
    int offloads = plan.host_bytes > 0;
    CHECK(offloads == (strstr(policy, "offload") != NULL), "%s: host bytes %.0f", policy, plan.host_bytes);

    /* the plan picture: a host tier, hatched per-name host bars, staging band, iff it offloads */
    const char *path = "/tmp/hyla_test_plan_real.svg";
    CHECK(hyla_plan_write_svg(&plan, policy, path) == HYLA_OK, "%s: %s", policy, hyla_error_message());
    char *t = read_all(path);
    CHECK(t, "cannot read back %s", path);
    if (t) {
        check_document(policy, t);
        CHECK(!!strstr(t, "<g id=\"host\">") == offloads, "%s: host tier %s", policy, offloads ? "missing" : "drawn");
        CHECK(!!strstr(t, ">offload staging <tspan") == offloads, "%s: staging band %s", policy, offloads ? "missing" : "drawn");
        for (int c = 0; c <= HYLA_CK__COUNT; c++) {
            const char *nm = hyla_ckpt_name_str((hyla_ckpt_name)c);
            char row[64];
            snprintf(row, sizeof row, ">%s<", nm);
            CHECK(!!strstr(t, row) == (plan.by_name[c] + plan.host_by_name[c] > 0), "%s: bar for %s", policy, nm);
        }
        CHECK(!offloads || strstr(t, " on host"), "%s: no host bytes in the bars", policy);
        free(t);
    }

    /* a measured step samples the plan's points and holds exactly the planned bytes there */
    hyla_executor ex;
    hyla_host_store *store = NULL;
    int rc = hyla_executor_init(&ex, &m, &pc.policy, unit, B, T, HYLA_DELTA_CHUNKED, 0);
    CHECK(rc == HYLA_OK, "init %s: %s", policy, hyla_error_message());
    if (rc == HYLA_OK && (rc = measured_step(&ex, &m, B, T, &store)) != HYLA_OK)
        CHECK(0, "step %s: %s", policy, hyla_error_message());
    if (rc == HYLA_OK) {
        int n = ex.n_measured, bad = -1;
        CHECK(n == plan.n_timeline && n > 0, "%s: %d samples measured, the plan has %d", policy, n, plan.n_timeline);
        double *dev = malloc((size_t)(n ? 2 * n : 1) * sizeof *dev), *host = dev ? dev + n : NULL;
        for (int i = 0; dev && i < n; i++) {
            dev[i] = (double)ex.measured_device[i], host[i] = (double)ex.measured_host[i];
            if (bad < 0 && i < plan.n_timeline && (dev[i] != plan.timeline[i] || host[i] != plan.host_timeline[i]))
                bad = i;
            CHECK(ex.measured_seconds[i] >= (i ? ex.measured_seconds[i - 1] : 0), "%s: time runs back at %d", policy, i);
        }
        CHECK(bad < 0, "%s: after op %d measured %.0f device / %.0f host bytes, planned %.0f / %.0f", policy, bad,
              bad >= 0 ? dev[bad] : 0, bad >= 0 ? host[bad] : 0, bad >= 0 ? plan.timeline[bad] : 0,
              bad >= 0 ? plan.host_timeline[bad] : 0);
        const char *mpath = "/tmp/hyla_test_measured.svg";
        CHECK(dev && hyla_measured_write_svg(&plan, ex.measured_seconds, dev, host, n, policy, mpath) == HYLA_OK,
              "measured %s: %s", policy, hyla_error_message());
        t = read_all(mpath);
        if (t) {
            check_document("measured", t);
            CHECK(strstr(t, "(exact)"), "%s: the measured picture does not say the plan was exact", policy);
            CHECK(strstr(t, "wall-clock time within the step"), "%s: no time axis", policy);
            CHECK(!!strstr(t, "<g id=\"host\">") == offloads, "%s: measured host tier", policy);
            CHECK(strstr(t, "MiB</text>"), "%s: no MiB axis ticks", policy);
            free(t);
        }
        free(dev);
    }
    hyla_executor_free(&ex);
    hyla_host_store_close(store);
    hyla_plan_free(&plan);
    hyla_model_free(&m);
}

int main(int argc, char **argv)
{
    const char *cases = argc > 1 ? argv[1] : "build/cases";
    const double G = 1e9;
    hyla_plan p;
    memset(&p, 0, sizeof p);
    p.params = 387000000;
    p.param_bytes = 0.194 * G, p.opt_bytes = 0.387 * G, p.batch_bytes = 131072;
    p.argument_bytes = p.param_bytes + p.opt_bytes + p.batch_bytes;
    p.checkpoint_bytes = 6.1 * G, p.work_bytes = 2.3 * G, p.carry_bytes = 0.27 * G, p.grad_bytes = 0.32 * G,
    p.gathered_bytes = 0.12 * G;
    p.temp_bytes = p.checkpoint_bytes + p.work_bytes + p.carry_bytes + p.grad_bytes + p.gathered_bytes;
    p.peak_bytes = p.argument_bytes + p.temp_bytes;
    p.by_name[HYLA_CK_DECODER_LAYER_INPUT] = 0.8 * G;
    p.by_name[HYLA_CK_GDN_IN_PROJ] = 1.8 * G;
    p.by_name[HYLA_CK_QUERY_PROJ] = 0.4 * G;
    p.by_name[HYLA_CK_MOE_MLPWO] = 3.1 * G;
    p.by_name[HYLA_CK_INTERNAL] = 0.05 * G;
    p.by_kind[0] = 4.6 * G, p.by_kind[1] = 1.55 * G;
    /* 24 layers: forward climbs in a sawtooth (each layer keeps its checkpoints, its working set
     * comes and goes), backward mirrors it */
    p.n_timeline = 500;
    p.timeline = malloc(500 * sizeof *p.timeline);
    for (int i = 0; i < 500; i++) {
        int f = i < 250 ? i : 499 - i;
        double kept = 6.1 * G * f / 250.0, work = 2.3 * G * (0.5 + 0.5 * sin(f * 0.6)) * (i < 250 ? 0.6 : 1.0);
        p.timeline[i] = kept + work;
    }

    const char *path = "/tmp/hyla_test_plan.svg";
    int rc = hyla_plan_write_svg(&p, "bench-387m <seq 8192> & minimal \"remat\"", path);
    CHECK(rc == HYLA_OK, "write %s: %s", path, hyla_error_message());
    char *t = rc == HYLA_OK ? read_all(path) : NULL;
    CHECK(t, "cannot read back %s", path);
    if (t) {
        check_document("full plan", t);
        for (int c = 0; c <= HYLA_CK__COUNT; c++) {
            const char *nm = hyla_ckpt_name_str((hyla_ckpt_name)c);
            if (p.by_name[c] > 0)
                CHECK(strstr(t, nm), "non-zero checkpoint name %s missing", nm);
        }
        CHECK(!strstr(t, "router_logits") && !strstr(t, "gdn_conv") && !strstr(t, "key_proj"),
              "a checkpoint name without bytes is drawn");
        CHECK(strstr(t, "bench-387m &lt;seq 8192&gt; &amp; minimal &quot;remat&quot;"), "title not escaped");
        CHECK(strstr(t, ">peak<"), "no peak marker");
        /* bars sorted descending: moe_mlpwo before gdn_in_proj before decoder_layer_input */
        const char *a = strstr(t, ">moe_mlpwo<"), *b = strstr(t, ">gdn_in_proj<"), *c = strstr(t, ">decoder_layer_input<"),
                   *d = strstr(t, ">internal<");
        CHECK(a && b && c && d && a < b && b < c && c < d, "checkpoint bars not sorted by bytes");
        CHECK(strstr(t, "GB</text>"), "no GB axis ticks");
        free(t);
    }

    /* a long timeline is thinned to the plot's width, keeping the peak */
    hyla_plan big = p;
    big.n_timeline = 200000;
    big.timeline = malloc((size_t)big.n_timeline * sizeof *big.timeline);
    for (int i = 0; i < big.n_timeline; i++)
        big.timeline[i] = (i == 123457 ? 9.0 : 4.0 + sin(i * 0.01)) * G;
    const char *path_long = "/tmp/hyla_test_plan_long.svg";
    CHECK(hyla_plan_write_svg(&big, "big", path_long) == HYLA_OK, "big: %s", hyla_error_message());
    t = read_all(path_long);
    if (t) {
        check_document("long timeline", t);
        CHECK(strlen(t) < 200000, "long timeline not thinned (%zu bytes)", strlen(t));
        CHECK(strstr(t, "at op 123457"), "thinned picture lost the peak");
        free(t);
    }
    free(big.timeline);

    /* an empty plan (no timeline, nothing kept, NULL title) still makes a document */
    hyla_plan empty;
    memset(&empty, 0, sizeof empty);
    empty.by_name[HYLA_CK_MLPWO] = NAN;
    const char *path_empty = "/tmp/hyla_test_plan_empty.svg";
    CHECK(hyla_plan_write_svg(&empty, NULL, path_empty) == HYLA_OK, "empty: %s", hyla_error_message());
    t = read_all(path_empty);
    if (t) {
        check_document("empty plan", t);
        CHECK(strstr(t, "no checkpoints kept"), "empty plan: no 'no checkpoints kept'");
        free(t);
    }

    /* an unwritable path is an I/O error naming it */
    const char *bad = "/nonexistent/dir/x.svg";
    rc = hyla_plan_write_svg(&p, "t", bad);
    CHECK(rc == HYLA_ERR_IO, "unwritable path returned %d", rc);
    CHECK(strstr(hyla_error_message(), bad), "error does not name the path: %s", hyla_error_message());
    CHECK(!hyla_file_exists(bad), "something was written at %s", bad);
    CHECK(hyla_plan_write_svg(NULL, "t", path) == HYLA_ERR_ARG, "NULL plan accepted");
    CHECK(hyla_plan_write_svg(&p, "t", NULL) == HYLA_ERR_ARG, "NULL path accepted");
    double one = 1;
    CHECK(hyla_measured_write_svg(NULL, &one, &one, NULL, 1, "t", path) == HYLA_ERR_ARG, "measured: NULL plan accepted");
    CHECK(hyla_measured_write_svg(&p, NULL, &one, NULL, 1, "t", path) == HYLA_ERR_ARG, "measured: NULL seconds accepted");
    CHECK(hyla_measured_write_svg(&p, &one, &one, NULL, 1, "t", bad) == HYLA_ERR_IO, "measured: unwritable path");

    char dir[4096];
    snprintf(dir, sizeof dir, "%s/next_moe_8l", cases);
    real_model(dir, "minimal_offloaded", HYLA_UNIT_LAYER, 1, 64);
    real_model(dir, "full", HYLA_UNIT_BLOCK, 2, 33);
    snprintf(dir, sizeof dir, "%s/q35_moe", cases);
    real_model(dir, "qkv_proj_offloaded", HYLA_UNIT_PART, 1, 40);

    free(p.timeline);
    if (failures) {
        printf("test_plan_svg: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_plan_svg: ok\n");
    return 0;
}
