/* hyla_plan_write_svg, hyla_measured_write_svg: a step's memory as one self-contained SVG (see
 * plan_svg.h). Both pictures are drawn by the same pieces: header, timeline panels (device tier,
 * host tier) and the per-name checkpoint bars. */
#include "engine/plan_svg.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/fileio.h"
#include "engine/policy.h"

/* ---- growable text buffer ---------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_reserve(sbuf *b, size_t extra)
{
    if (b->oom || b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 16384;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->oom = 1;
        return;
    }
    b->s = s, b->cap = cap;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    va_list ap;
    va_start(ap, fmt);
    char tmp[512];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return;
    }
    sb_reserve(b, (size_t)n);
    if (b->oom)
        return;
    if ((size_t)n < sizeof tmp) {
        memcpy(b->s + b->len, tmp, (size_t)n + 1);
    } else {
        va_start(ap, fmt);
        vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

/* Text content / attribute value, XML-escaped. */
static void sb_escaped(sbuf *b, const char *t)
{
    for (; t && *t; t++) {
        switch (*t) {
        case '&': sb_printf(b, "&amp;"); break;
        case '<': sb_printf(b, "&lt;"); break;
        case '>': sb_printf(b, "&gt;"); break;
        case '"': sb_printf(b, "&quot;"); break;
        case '\'': sb_printf(b, "&apos;"); break;
        default:
            if ((unsigned char)*t < 0x20 && *t != '\t' && *t != '\n')
                sb_printf(b, " "); /* control characters are not allowed in XML 1.0 */
            else
                sb_printf(b, "%c", *t);
        }
    }
}

/* ---- numbers ----------------------------------------------------------------------------- */

static double clean(double v) { return isfinite(v) && v > 0 ? v : 0; }

/* Byte units of one picture: decimal (GB = 1e9, as hyla plan prints) or binary (MiB, as hyla
 * train prints). */
typedef struct {
    double k;
    const char *name[6];
} units;
static const units DECIMAL = {1000, {"B", "kB", "MB", "GB", "TB", "PB"}};
static const units BINARY = {1024, {"B", "KiB", "MiB", "GiB", "TiB", "PiB"}};

/* The unit for v: u->k ^ power with v / unit in [1, k) (power 0 below k). */
static double unit_for(const units *u, double v, const char **name)
{
    int p = 0;
    double unit = 1;
    while (p < 5 && fabs(v) >= unit * u->k)
        unit *= u->k, p++;
    *name = u->name[p];
    return unit;
}

/* Three significant figures: "3.22", "15.8", "805". */
static void fmt_sig(char *out, size_t cap, double v, const char *unit)
{
    snprintf(out, cap, fabs(v) < 10 ? "%.2f %s" : fabs(v) < 100 ? "%.1f %s" : "%.0f %s", v, unit);
}

/* "15.8 GB", "805 MB", "12.3 MiB"; whole bytes below one kilo. */
static void fmt_bytes(const units *u, char *out, size_t cap, double v)
{
    const char *name;
    double unit = unit_for(u, v, &name);
    if (unit == 1)
        snprintf(out, cap, "%.0f B", v);
    else
        fmt_sig(out, cap, v / unit, name);
}

/* "850 µs", "12.3 ms", "1.25 s". */
static void fmt_seconds(char *out, size_t cap, double s)
{
    if (s < 1e-3)
        fmt_sig(out, cap, s * 1e6, "\xC2\xB5s");
    else if (s < 1)
        fmt_sig(out, cap, s * 1e3, "ms");
    else
        fmt_sig(out, cap, s, "s");
}

/* A 1-2-2.5-5 step near range / target. */
static double nice_step(double range, int target)
{
    if (!(range > 0))
        return 1;
    double raw = range / target, mag = pow(10, floor(log10(raw))), n = raw / mag;
    return (n <= 1 ? 1 : n <= 2 ? 2 : n <= 2.5 ? 2.5 : n <= 5 ? 5 : 10) * mag;
}

/* Decimals that print every multiple of step exactly (at most 3). */
static int step_decimals(double step)
{
    int dec = 0;
    while (dec < 3 && fabs(step * pow(10, dec) - round(step * pow(10, dec))) > 1e-6)
        dec++;
    return dec;
}

/* Index of the largest value (the first of equals); 0 when n is 0. */
static int argmax(const double *v, int n)
{
    int at = 0;
    for (int i = 1; i < n; i++)
        if (clean(v[i]) > clean(v[at]))
            at = i;
    return at;
}

static double max_of(const double *v, int n) { return n > 0 && v ? clean(v[argmax(v, n)]) : 0; }

/* ---- palette ----------------------------------------------------------------------------- */

#define C_TEXT "#1F2933"
#define C_MUTED "#616E7C"
#define C_GRID "#E4E7EB"
#define C_AXIS "#9AA5B1"
#define C_PEAK "#C2410C"
#define C_ACT_LINE "#1E4E8C"
#define C_HOST "#2F9488"
#define C_HOST_LINE "#17655C"
#define C_STAGING "#86CFC4"

/* One colour per checkpoint name, by family: residuals blue, GDN green, attention purple,
 * router gold, routed experts orange, dense MLP red, internal grey. */
static const char *ck_color[HYLA_CK__COUNT + 1] = {
    [HYLA_CK_DECODER_LAYER_INPUT] = "#3B75AF",
    [HYLA_CK_FFN_INPUT] = "#8FBBE0",
    [HYLA_CK_GDN_IN_PROJ] = "#3E9651",
    [HYLA_CK_GDN_CONV] = "#8CCB7E",
    [HYLA_CK_GDN_CORE] = "#2A7B72",
    [HYLA_CK_GDN_NORM] = "#7CC6B6",
    [HYLA_CK_OUT_PROJ] = "#C46AA5",
    [HYLA_CK_QUERY_PROJ] = "#6A4C9C",
    [HYLA_CK_KEY_PROJ] = "#9879CF",
    [HYLA_CK_VALUE_PROJ] = "#C3AEE8",
    [HYLA_CK_CONTEXT] = "#8E4F8F",
    [HYLA_CK_ATTENTION_OUT] = "#E2A9D0",
    [HYLA_CK_ROUTER_LOGITS] = "#D9B430",
    [HYLA_CK_MOE_MLPWI_0] = "#EE8A2A",
    [HYLA_CK_MOE_MLPWI_1] = "#F8BF7E",
    [HYLA_CK_MOE_MLPWO] = "#B9571C",
    [HYLA_CK_MLPWI_0] = "#DB4F4F",
    [HYLA_CK_MLPWI_1] = "#F29A95",
    [HYLA_CK_MLPWO] = "#9E2F3A",
    [HYLA_CK_INTERNAL] = "#9AA1A9",
};

/* Shared paint: the device area's gradient and the hatch that marks host bytes everywhere. */
#define DEFS                                                                                                          \
    "<defs>\n<linearGradient id=\"actfill\" x1=\"0\" y1=\"0\" x2=\"0\" y2=\"1\">\n"                                  \
    "<stop offset=\"0\" stop-color=\"#3D7DC4\" stop-opacity=\"0.92\"/>\n"                                             \
    "<stop offset=\"1\" stop-color=\"#3D7DC4\" stop-opacity=\"0.55\"/>\n</linearGradient>\n"                          \
    "<pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">\n" \
    "<rect width=\"2.2\" height=\"6\" fill=\"#FFFFFF\" fill-opacity=\"0.6\"/>\n</pattern>\n</defs>\n"

/* ---- layout ------------------------------------------------------------------------------ */

#define W 960
#define PL 84        /* plot left */
#define PR (W - 36)  /* plot right */
#define PW (PR - PL) /* plot width */
#define ROW_H 24

#define FONT "font-family=\"Helvetica Neue, Helvetica, Arial, DejaVu Sans, sans-serif\""

/* The document being drawn and the byte units it speaks. */
typedef struct {
    sbuf b;
    const units *u;
} doc;

static double approx_text_w(const char *t, double size) { return (double)strlen(t) * size * 0.6; }

/* A hatched overlay on a rect already drawn: host bytes. */
static void hatch_rect(sbuf *b, double x, double y, double w, double h)
{
    sb_printf(b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"url(#hatch)\"/>\n", x, y, w, h);
}

/* A legend entry at (*x, *y), wrapping to a new row before the right margin; advances *x. */
static void legend_item(sbuf *b, double *x, double *y, const char *color, int hatched, const char *label, const char *value)
{
    double w = 17 + approx_text_w(label, 12) + (value ? approx_text_w(value, 12) + 4 : 0);
    if (*x > 28 && *x + w > W - 28)
        *x = 28, *y += 20;
    sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" rx=\"3\" fill=\"%s\"/>\n", *x, *y - 10, color);
    if (hatched)
        hatch_rect(b, *x, *y - 10, 12, 12);
    sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"" C_TEXT "\">", *x + 17, *y);
    sb_escaped(b, label);
    if (value)
        sb_printf(b, " <tspan fill=\"" C_MUTED "\">%s</tspan>", value);
    sb_printf(b, "</text>\n");
    *x += w + 18;
}

/* Title, shrunk (then squeezed) to fit one line. */
static void header_title(sbuf *b, const char *title)
{
    double avail = W - 56, size = 21, w = approx_text_w(title, 1) * 1.04; /* bold runs wider */
    if (w * size > avail)
        size = fmax(14, avail / w);
    sb_printf(b, "<text x=\"28\" y=\"38\" font-size=\"%.1f\" font-weight=\"700\" fill=\"" C_TEXT "\"", size);
    if (w * size > avail)
        sb_printf(b, " textLength=\"%.0f\" lengthAdjust=\"spacingAndGlyphs\"", avail);
    sb_printf(b, ">");
    sb_escaped(b, title);
    sb_printf(b, "</text>\n");
}

/* The plan's argument / temp (/ host) breakdown from y down, and a rule. Returns the next y. */
static int header_breakdown(doc *d, const hyla_plan *p, int y)
{
    sbuf *b = &d->b;
    char v[8][32];
    const double parts[8] = {p->param_bytes, p->opt_bytes, p->batch_bytes, p->checkpoint_bytes, p->work_bytes,
                             p->carry_bytes, p->grad_bytes, p->gathered_bytes};
    for (int i = 0; i < 8; i++)
        fmt_bytes(d->u, v[i], sizeof v[i], clean(parts[i]));
    sb_printf(b, "<text x=\"28\" y=\"%d\" font-size=\"11.5\" fill=\"" C_MUTED "\">argument = parameters %s + AdamW moments"
                 " %s + batch %s</text>\n", y, v[0], v[1], v[2]);
    y += 16;
    sb_printf(b, "<text x=\"28\" y=\"%d\" font-size=\"11.5\" fill=\"" C_MUTED "\">temp = checkpoints %s + working set %s"
                 " + carries %s + gradients %s", y, v[3], v[4], v[5], v[6]);
    if (clean(p->gathered_bytes) > 0)
        sb_printf(b, " + gathered weights %s", v[7]);
    if (clean(p->staging_bytes) > 0) {
        fmt_bytes(d->u, v[0], sizeof v[0], p->staging_bytes);
        sb_printf(b, " + offload staging %s", v[0]);
    }
    sb_printf(b, "</text>\n");
    if (clean(p->host_bytes) > 0) {
        y += 16;
        fmt_bytes(d->u, v[0], sizeof v[0], p->host_bytes);
        sb_printf(b, "<text x=\"28\" y=\"%d\" font-size=\"11.5\" fill=\"" C_MUTED "\">host = offloaded checkpoints %s"
                     " (not on the device)</text>\n", y, v[0]);
    }
    y += 14;
    sb_printf(b, "<line x1=\"28\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"" C_GRID "\" stroke-width=\"1\"/>\n", y, W - 28, y);
    return y;
}

/* ---- timeline panels --------------------------------------------------------------------- */

/* A flat band: bytes held for the whole step. */
typedef struct {
    const char *label, *color;
    int hatched;
    double bytes;
} band;

/* One live-bytes series over the step (a sample after every op) in a plot box, on flat bands. */
typedef struct {
    const char *id, *title;            /* the group's id, the panel's heading */
    int height, y_ticks;               /* plot height, about how many y ticks */
    const double *t;                   /* seconds at each sample; NULL: op index */
    const double *y;                   /* live bytes after each op, [n] */
    int n;
    const band *bands;                 /* bottom first */
    int n_bands, n_under;              /* the first n_under lift the series; the rest are bytes counted in y
                                        * (offload staging), drawn inside the live area: as `inner` when given,
                                        * else flat at their reserved size */
    const double *inner;               /* [n] the part of y that is offload staging in use, or NULL */
    const char *label, *fill, *stroke; /* the series: legend label, area paint, line colour */
    int hatched;                       /* host bytes */
    double ref;                        /* a dashed horizontal line at ref bytes (0: none) */
    char ref_label[64];
    int split;                         /* forward / backward marker at this sample (-1: none) */
    int split_is_peak;                 /* the marker is also the peak: red, "peak" between the labels */
    int split_labelled;                /* "◀ forward  backward ▶" around the marker */
    char peak1[96], peak2[96];         /* the label box at the series maximum */
    const char *empty;                 /* said when there are no samples */
    int x_title;                       /* the x axis title under this panel */
} panel;

/* Pixel mapping of a plot box: x over op index or seconds, y over bytes [ymin, ymax]. */
typedef struct {
    int top, bottom, n;
    const double *t;
    double tmax, ymin, ymax;
} frame;

static double fx(const frame *f, int i)
{
    if (f->t)
        return PL + clean(f->t[i]) / f->tmax * PW;
    return f->n > 1 ? PL + (double)i / (f->n - 1) * PW : PL + PW / 2.0;
}

/* Bytes below ymin sit on the bottom edge (bands cut by a zoomed axis). */
static double fy(const frame *f, double v)
{
    return f->bottom - fmax(0, v - f->ymin) / (f->ymax - f->ymin) * (f->bottom - f->top);
}

/* The series' path. Over op index: one vertex per sample. Over time: two, at the start and the
 * end of op i, both at y[i], so each op's bytes span the time it ran. */
static int n_vertices(const frame *f) { return f->t ? 2 * f->n : f->n; }
static int vertex_sample(const frame *f, int k) { return f->t ? k / 2 : k; }

static double vertex_x(const frame *f, int k)
{
    if (!f->t)
        return fx(f, k);
    return k % 2 ? fx(f, k / 2) : k > 0 ? fx(f, k / 2 - 1) : PL;
}

/* The plot column (0 .. PW) vertex k falls in. */
static int vertex_col(const frame *f, int k)
{
    int c = (int)(vertex_x(f, k) - PL);
    return c < 0 ? 0 : c > PW ? PW : c;
}

/* A y axis in the picture's units: nice steps, their unit, and the axis range in bytes. */
typedef struct {
    double step, unit, min, max;
    const char *name;
} yscale;

/* The axis for values in [low, top]. It starts at zero unless the live part is a sliver on tall
 * bands (a small model's activations on its parameters and moments): then it starts just below
 * `low`, so the curve keeps its shape. */
static yscale y_scale(const units *u, double low, double top, int ticks)
{
    yscale s;
    double span = top - low, want = top > 0 ? top * 1.06 : 1;
    int zoom = low > 0 && span > 1e-3 * top && span < 0.15 * top;
    s.unit = unit_for(u, want, &s.name);
    s.step = nice_step((zoom ? span * 1.12 : want) / s.unit, ticks);
    if (s.unit == 1 && s.step < 1) /* no fractional bytes */
        s.step = 1;
    double q = s.step * s.unit;
    s.min = zoom ? floor(low / q) * q : 0;
    s.max = ceil((zoom ? top + 0.06 * span : want) / q) * q;
    return s;
}

static void y_axis(sbuf *b, const frame *f, const yscale *s)
{
    sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#FAFBFC\"/>\n", PL, f->top, PW, f->bottom - f->top);
    sb_printf(b, "<g font-size=\"11\" fill=\"" C_MUTED "\" text-anchor=\"end\">\n");
    int dec = step_decimals(s->step);
    for (int k = 0; s->min + k * s->step * s->unit <= s->max * (1 + 1e-9); k++) {
        double v = s->min + k * s->step * s->unit, y = fy(f, v);
        if (k > 0)
            sb_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"" C_GRID "\"/>\n", PL, y, PR, y);
        sb_printf(b, "<text x=\"%d\" y=\"%.1f\">%.*f %s</text>\n", PL - 8, y + 4, dec, v / s->unit, s->name);
    }
    sb_printf(b, "</g>\n");
}

/* The y axis line, broken near the bottom when the axis does not start at zero. */
static void y_axis_line(sbuf *b, const frame *f, int broken)
{
    sb_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"" C_AXIS "\"/>\n", PL, f->top, PL, f->bottom);
    if (broken) /* a white gap between two slashes */
        sb_printf(b, "<path d=\"M%d,%d l12,-6 l0,5 l-12,6 Z\" fill=\"#FFFFFF\"/>\n<path d=\"M%d,%d l12,-6 m-12,11 l12,-6\""
                     " stroke=\"" C_MUTED "\" stroke-width=\"1.3\"/>\n", PL - 8, f->bottom - 10, PL - 8, f->bottom - 10);
}

/* X ticks under the plot: op index, or wall-clock time in µs / ms / s. */
static void x_axis(sbuf *b, const frame *f, int with_title)
{
    double mul = !f->t ? 1 : f->tmax < 1e-3 ? 1e6 : f->tmax < 1 ? 1e3 : 1;
    const char *name = !f->t ? "" : mul == 1e6 ? " \xC2\xB5s" : mul == 1e3 ? " ms" : " s";
    double range = f->t ? f->tmax * mul : f->n - 1, step = nice_step(range > 0 ? range : 1, 10);
    if (!f->t) /* whole ops */
        step = step < 1 ? 1 : step < 10 ? floor(step) : step;
    int dec = step_decimals(step);
    sb_printf(b, "<g font-size=\"11\" fill=\"" C_MUTED "\" text-anchor=\"middle\">\n");
    for (int k = 0; f->n > 0 && k * step <= range * (1 + 1e-9); k++) {
        double x = f->t ? PL + k * step / range * PW : fx(f, (int)(k * step));
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"" C_AXIS "\"/>\n", x, f->bottom, x,
                  f->bottom + 5);
        sb_printf(b, "<text x=\"%.1f\" y=\"%d\">%.*f%s</text>\n", x, f->bottom + 18, dec, k * step, name);
    }
    sb_printf(b, "</g>\n");
    if (with_title)
        sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"12\" fill=\"" C_MUTED "\" text-anchor=\"middle\">%s (%d ops,"
                     " forward then backward)</text>\n", PL + PW / 2, f->bottom + 38,
                  f->t ? "wall-clock time within the step" : "op index", f->n);
}

static void bands_draw(sbuf *b, const frame *f, const band *bs, int n)
{
    double acc = 0;
    for (int k = 0; k < n; k++) {
        double v = clean(bs[k].bytes);
        if (v <= 0)
            continue;
        double y0 = fy(f, acc + v), y1 = fy(f, acc);
        acc += v;
        if (y1 - y0 < 0.01) /* below a zoomed axis */
            continue;
        sb_printf(b, "<rect x=\"%d\" y=\"%.2f\" width=\"%d\" height=\"%.2f\" fill=\"%s\"/>\n", PL, y0, PW, y1 - y0,
                  bs[k].color);
        if (bs[k].hatched)
            hatch_rect(b, PL, y0, PW, y1 - y0);
    }
}

/* Bytes at vertex k: offset + its sample, raised to at least lo. */
static double vertex_v(const frame *f, const double *y, int k, double offset, double lo)
{
    return fmax(lo, offset + clean(y[vertex_sample(f, k)]));
}

static void point(sbuf *pts, const frame *f, int k, double v)
{
    sb_printf(pts, "%s%.1f,%.1f", pts->len ? " " : "", vertex_x(f, k), fy(f, v));
}

/* "x,y" points of the series' path. A long step keeps at most two points per plot column (its
 * minimum and maximum, in order), so the file stays small and no peak is lost. */
static void series_points(sbuf *pts, const frame *f, const double *y, double offset, double lo)
{
    int nv = n_vertices(f);
    for (int k = 0; k < nv;) {
        int j = k + 1, mn = k, mx = k;
        if (nv > 2 * PW)
            for (; j < nv && vertex_col(f, j) == vertex_col(f, k); j++) {
                mn = vertex_v(f, y, j, offset, lo) < vertex_v(f, y, mn, offset, lo) ? j : mn;
                mx = vertex_v(f, y, j, offset, lo) > vertex_v(f, y, mx, offset, lo) ? j : mx;
            }
        int a = mn < mx ? mn : mx, z = mn < mx ? mx : mn;
        point(pts, f, a, vertex_v(f, y, a, offset, lo));
        if (z != a)
            point(pts, f, z, vertex_v(f, y, z, offset, lo));
        k = j;
    }
}

/* The live area from `floor_` up to offset + y (hatched for host bytes), and its line. */
/* The area between floor_ and offset + y, in `fill`, hatched on top when asked. */
static void area_draw(sbuf *b, const frame *f, const double *y, double offset, double floor_, const char *fill, int hatched)
{
    sbuf area = {0};
    series_points(&area, f, y, offset, floor_);
    if (area.oom)
        b->oom = 1;
    else
        for (int pass = 0; pass < 1 + hatched; pass++)
            sb_printf(b, "<path d=\"M%.1f,%.1f L%s L%.1f,%.1f Z\" fill=\"%s\"/>\n", vertex_x(f, 0), fy(f, floor_), area.s,
                      vertex_x(f, n_vertices(f) - 1), fy(f, floor_), pass ? "url(#hatch)" : fill);
    free(area.s);
}

static void series_draw(sbuf *b, const frame *f, const panel *pn, double offset, double floor_)
{
    sbuf line = {0};
    area_draw(b, f, pn->y, offset, floor_, pn->fill, pn->hatched);
    if (pn->inner) /* staging in use: the bottom of the live area */
        area_draw(b, f, pn->inner, offset, floor_, pn->bands[pn->n_under].color, 1);
    series_points(&line, f, pn->y, offset, 0);
    if (line.oom)
        b->oom = 1;
    else
        sb_printf(b, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.4\" stroke-linejoin=\"round\"/>\n",
                  line.s, pn->stroke);
    free(line.s);
}

static void ref_draw(sbuf *b, const frame *f, double v, const char *label)
{
    double y = fy(f, v);
    sb_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"" C_TEXT "\" stroke-width=\"1\""
                 " stroke-dasharray=\"2 3\" opacity=\"0.7\"/>\n", PL, y, PR, y);
    sb_printf(b, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" fill=\"" C_TEXT "\" text-anchor=\"end\">", PR - 4, y - 5);
    sb_escaped(b, label);
    sb_printf(b, "</text>\n");
}

/* The forward / backward boundary: a dashed vertical line with "forward" and "backward" either
 * side (labels only when `labelled`), red and marked "peak" when the peak is right there. */
static void split_draw(sbuf *b, const frame *f, int i, int is_peak, int labelled)
{
    double xp = fx(f, i);
    sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" stroke-width=\"1.5\""
                 " stroke-dasharray=\"5 4\"/>\n", xp, f->top - (is_peak ? 4 : 0), xp, f->bottom, is_peak ? C_PEAK : C_AXIS);
    if (!labelled)
        return;
    if (is_peak)
        sb_printf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"12\" font-weight=\"700\" fill=\"" C_PEAK "\""
                     " text-anchor=\"middle\">peak</text>\n", xp, f->top - 8);
    if (xp - PL > 90)
        sb_printf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"11.5\" fill=\"" C_MUTED "\" text-anchor=\"end\">"
                     "\xE2\x97\x80 forward</text>\n", xp - 26, f->top - 8);
    if (PR - xp > 90)
        sb_printf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"11.5\" fill=\"" C_MUTED "\">backward"
                     " \xE2\x96\xB6</text>\n", xp + 26, f->top - 8);
}

/* For each plot column, the highest point (smallest pixel y) the series line reaches there. */
static void column_tops(const frame *f, const double *y, double offset, double *top)
{
    for (int c = 0; c <= PW; c++)
        top[c] = f->bottom;
    for (int k = 0; k < n_vertices(f); k++) {
        int h = k > 0 ? k - 1 : k, c0 = vertex_col(f, h), c1 = vertex_col(f, k);
        double py = fy(f, fmax(vertex_v(f, y, k, offset, 0), vertex_v(f, y, h, offset, 0)));
        for (int c = c0 < c1 ? c0 : c1; c <= (c0 < c1 ? c1 : c0); c++)
            top[c] = fmin(top[c], py);
    }
}

/* A circle at sample `at` and a two-line label box beside it, placed where it hides the least of
 * the area and keeps the reference line's label readable. */
static void peak_draw(sbuf *b, const frame *f, const panel *pn, int at, double offset)
{
    double xp = fx(f, at), yp = fy(f, offset + clean(pn->y[at]));
    double bw = fmax(approx_text_w(pn->peak1, 12.5), approx_text_w(pn->peak2, 11)) + 18, bh = 40;
    double tlx = PR - 4 - approx_text_w(pn->ref_label, 11) - 6, ry = pn->ref > 0 ? fy(f, pn->ref) : -1e9;
    double top[PW + 1];
    column_tops(f, pn->y, offset, top);
    double bx = 0, by = 0, best = 1e300;
    for (int side = 0; side < 2; side++) {
        double cx = side ? xp - 14 - bw : xp + 14;
        if (cx < PL + 4 || cx + bw > PR - 4)
            continue;
        for (double cy = f->top + 4; cy + bh <= f->bottom - 4; cy += 4) {
            double hidden = 0; /* plot columns of the box the area fills */
            for (int c = (int)(cx - PL); c <= (int)(cx + bw - PL) && c <= PW; c++)
                hidden += fmax(0, cy + bh - fmax(cy, top[c])) / bh;
            double cost = hidden + fabs(cy - yp) * 0.08 + side * 2;
            if (cx + bw > tlx && cy < ry && cy + bh > ry - 18)
                cost += 1e6;
            if (cost < best)
                best = cost, bx = cx, by = cy;
        }
    }
    if (best == 1e300) /* too narrow on both sides: below the peak */
        bx = fmin(fmax(xp - bw / 2, PL + 4), PR - 4 - bw), by = fmin(yp + 14, f->bottom - 4 - bh);
    sb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"#FFFFFF\" stroke=\"" C_PEAK "\" stroke-width=\"2\"/>\n",
              xp, yp);
    sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" rx=\"6\" fill=\"#FFFFFF\""
                 " fill-opacity=\"0.93\" stroke=\"" C_PEAK "\" stroke-width=\"1\"/>\n", bx, by, bw, bh);
    sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12.5\" font-weight=\"700\" fill=\"" C_PEAK "\">%s</text>\n",
              bx + 9, by + 17, pn->peak1);
    sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"" C_MUTED "\">%s</text>\n", bx + 9, by + 32, pn->peak2);
}

/* Heading, legend and plot of one panel starting at y. Returns the y below it. */
static int panel_draw(doc *d, const panel *pn, int y)
{
    sbuf *b = &d->b;
    double under = 0, floor_ = 0;
    for (int k = 0; k < (pn->inner ? pn->n_under : pn->n_bands); k++) { /* the live area starts at floor_ */
        floor_ += clean(pn->bands[k].bytes);
        under += k < pn->n_under ? clean(pn->bands[k].bytes) : 0;
    }
    int n = pn->y ? pn->n : 0, at = argmax(pn->y, n);
    double top = fmax(fmax(under + max_of(pn->y, n), floor_), clean(pn->ref)), low = floor_;
    for (int i = 0; i < n; i++)
        low = fmin(low, under + clean(pn->y[i]));
    yscale s = y_scale(d->u, low, top, pn->y_ticks);

    sb_printf(b, "<g id=\"%s\">\n", pn->id);
    sb_printf(b, "<text x=\"28\" y=\"%d\" font-size=\"15\" font-weight=\"700\" fill=\"" C_TEXT "\">%s", y + 26, pn->title);
    if (s.min > 0) {
        char v[32];
        fmt_bytes(d->u, v, sizeof v, s.min);
        sb_printf(b, " <tspan font-size=\"12\" font-weight=\"400\" fill=\"" C_MUTED "\">(zoomed: the axis starts at %s)</tspan>", v);
    }
    sb_printf(b, "</text>\n");
    double lx = 28, ly = y + 50;
    char v[32];
    legend_item(b, &lx, &ly, pn->hatched ? C_HOST : "#3D7DC4", pn->hatched, pn->label, NULL);
    for (int k = pn->n_bands - 1; k >= 0; k--)
        if (clean(pn->bands[k].bytes) > 0) {
            fmt_bytes(d->u, v, sizeof v, pn->bands[k].bytes);
            legend_item(b, &lx, &ly, pn->bands[k].color, pn->bands[k].hatched, pn->bands[k].label, v);
        }

    frame f = {(int)ly + 30, (int)ly + 30 + pn->height, n, pn->t, n > 0 && pn->t ? max_of(pn->t, n) : 0, s.min, s.max};
    if (!(f.tmax > 0))
        f.tmax = 1e-9;
    y_axis(b, &f, &s);
    x_axis(b, &f, pn->x_title);
    bands_draw(b, &f, pn->bands, pn->inner ? pn->n_under : pn->n_bands);
    if (n > 0)
        series_draw(b, &f, pn, under, floor_);
    sb_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"" C_AXIS "\"/>\n", PL, f.bottom, PR, f.bottom);
    y_axis_line(b, &f, s.min > 0);
    if (pn->ref > 0)
        ref_draw(b, &f, pn->ref, pn->ref_label);
    if (n > 0) {
        if (pn->split >= 0 && pn->split < n)
            split_draw(b, &f, pn->split, pn->split_is_peak, pn->split_labelled);
        peak_draw(b, &f, pn, at, under);
    } else {
        sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"13\" fill=\"" C_MUTED "\" text-anchor=\"middle\">%s</text>\n",
                  PL + PW / 2, (f.top + f.bottom) / 2, pn->empty);
    }
    sb_printf(b, "</g>\n");
    return f.bottom + (pn->x_title ? 40 : 22);
}

/* ---- the step: device tier, host tier ---------------------------------------------------- */

/* What the plan and the measured picture differ in: the x axis, the series, the references. */
typedef struct {
    const double *t;             /* seconds at each sample; NULL: op index */
    const double *device, *host; /* live bytes after each op; host NULL: none */
    int n;
    double device_ref, host_ref; /* dashed reference lines (0: none) */
    const char *device_ref_what, *host_ref_what, *device_title, *host_title, *empty;
} step_view;

/* "op 1009", or "12.3 ms (op 45)" on a time axis. */
static void fmt_when(char *out, size_t cap, const double *t, int i)
{
    char s[32];
    if (!t) {
        snprintf(out, cap, "op %d", i);
        return;
    }
    fmt_seconds(s, sizeof s, clean(t[i]));
    snprintf(out, cap, "%s (op %d)", s, i);
}

/* The device tier's flat bands, bottom first. The first *n_under lift the live activations;
 * offload staging is part of them (the timeline counts the staging in use), so its band lies at
 * the bottom of the live area. */
static int device_bands(const hyla_plan *p, band *out, int *n_under)
{
    int n = 0;
    out[n++] = (band){"arguments", "#A3B1C6", 0, p->argument_bytes};
    out[n++] = (band){"gradients", "#E58F73", 0, p->grad_bytes};
    out[n++] = (band){"gathered weights", "#B79BDB", 0, p->gathered_bytes};
    out[n++] = (band){"carries", "#F2C55C", 0, p->carry_bytes};
    *n_under = n;
    out[n++] = (band){"offload staging", C_STAGING, 1, p->staging_bytes};
    return n;
}

static int has_host_tier(const hyla_plan *p, const step_view *sv)
{
    return sv->host && (clean(p->host_bytes) > 0 || max_of(sv->host, sv->n) > 0);
}

/* The device panel and, when the step offloads, the host panel under it on the same x axis. */
static int tiers_draw(doc *d, const hyla_plan *p, const step_view *sv, int y)
{
    band bands[5];
    int n_under, n_bands = device_bands(p, bands, &n_under), host = has_host_tier(p, sv);
    double under = 0;
    for (int k = 0; k < n_under; k++)
        under += clean(bands[k].bytes);
    int peak = sv->n > 0 ? argmax(sv->device, sv->n) : -1, hpeak = host && sv->n > 0 ? argmax(sv->host, sv->n) : 0;
    int split = p->n_forward > 0 && p->n_forward < sv->n ? p->n_forward : peak; /* first backward sample */
    char when[48], v1[32], v2[32];
    panel dev = {.id = "timeline", .title = sv->device_title, .height = 300, .y_ticks = 6, .t = sv->t, .y = sv->device,
                 .n = sv->n, .bands = bands, .n_bands = n_bands, .n_under = n_under,
                 .inner = p->staging_timeline && p->n_timeline == sv->n && p->staging_bytes > 0 ? p->staging_timeline : NULL,
                 .label = "live activations",
                 .fill = "url(#actfill)", .stroke = C_ACT_LINE, .ref = sv->device_ref, .split = split,
                 .split_is_peak = split == peak, .split_labelled = 1, .empty = sv->empty, .x_title = !host};
    fmt_bytes(d->u, v1, sizeof v1, clean(sv->device_ref));
    snprintf(dev.ref_label, sizeof dev.ref_label, "%s %s", sv->device_ref_what, v1);
    if (peak >= 0) {
        fmt_when(when, sizeof when, sv->t, peak);
        fmt_bytes(d->u, v1, sizeof v1, under + clean(sv->device[peak]));
        snprintf(dev.peak1, sizeof dev.peak1, "%s live at %s", v1, when);
        fmt_bytes(d->u, v1, sizeof v1, clean(sv->device[peak]));
        fmt_bytes(d->u, v2, sizeof v2, under);
        snprintf(dev.peak2, sizeof dev.peak2, "activations %s + %s below", v1, v2);
    }
    y = panel_draw(d, &dev, y);
    if (!host)
        return y;
    panel hp = {.id = "host", .title = sv->host_title, .height = 130, .y_ticks = 3, .t = sv->t, .y = sv->host, .n = sv->n,
                .label = "offloaded checkpoints", .fill = C_HOST, .stroke = C_HOST_LINE, .hatched = 1, .ref = sv->host_ref,
                .split = split, .empty = sv->empty, .x_title = 1};
    fmt_bytes(d->u, v1, sizeof v1, clean(sv->host_ref));
    snprintf(hp.ref_label, sizeof hp.ref_label, "%s %s", sv->host_ref_what ? sv->host_ref_what : "", v1);
    if (sv->n > 0) {
        fmt_when(when, sizeof when, sv->t, hpeak);
        fmt_bytes(d->u, v1, sizeof v1, clean(sv->host[hpeak]));
        snprintf(hp.peak1, sizeof hp.peak1, "%s on host at %s", v1, when);
        snprintf(hp.peak2, sizeof hp.peak2, "written in forward, read back in backward");
    }
    return panel_draw(d, &hp, y - 4);
}

/* ---- checkpoints by name ----------------------------------------------------------------- */

/* Names with bytes (device + host), largest first (ties: enum order). Returns how many. */
static int checkpoint_order(const hyla_plan *p, double *total, int *order)
{
    int m = 0;
    for (int c = 0; c <= HYLA_CK__COUNT; c++) {
        total[c] = clean(p->by_name[c]) + clean(p->host_by_name[c]);
        if (total[c] > 0)
            order[m++] = c;
    }
    for (int i = 1; i < m; i++)
        for (int j = i; j > 0 && total[order[j]] > total[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    return m;
}

/* One name's bar: a solid device segment, then a hatched host segment, in the name's colour. */
static void split_bar(sbuf *b, double x, double y, double wd, double wh, double h, const char *color)
{
    if (wd > 0)
        sb_printf(b, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"/>\n", x, y, wd, h, color);
    if (wh > 0) {
        sb_printf(b, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" fill-opacity=\"0.6\"/>\n",
                  x + wd, y, wh, h, color);
        hatch_rect(b, x + wd, y, wh, h);
    }
}

/* Heading lines of the checkpoint panel: totals, per layer kind, and (with host bytes) the
 * solid / hatched key. Returns the y of the share bar. */
static int checkpoint_heading(doc *d, const hyla_plan *p, int y0, double dev, double host)
{
    sbuf *b = &d->b;
    char s[32], h[32], k[4][32];
    fmt_bytes(d->u, s, sizeof s, dev);
    fmt_bytes(d->u, h, sizeof h, host);
    const double kinds[4] = {p->by_kind[0], p->by_kind[1], p->host_by_kind[0], p->host_by_kind[1]};
    for (int i = 0; i < 4; i++)
        fmt_bytes(d->u, k[i], sizeof k[i], clean(kinds[i]));
    sb_printf(b, "<text x=\"28\" y=\"%d\" font-size=\"15\" font-weight=\"700\" fill=\"" C_TEXT "\">Checkpoints by name"
                 " <tspan font-weight=\"400\" fill=\"" C_MUTED "\">", y0);
    if (host > 0)
        sb_printf(b, "%s kept on device + %s offloaded to host, all layers</tspan></text>\n", s, h);
    else
        sb_printf(b, "%s kept in all layers</tspan></text>\n", s);
    if (host <= 0) {
        sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"11.5\" fill=\"" C_MUTED "\" text-anchor=\"end\">linear-attention"
                     " layers %s \xC2\xB7 full-attention layers %s</text>\n", W - 28, y0, k[0], k[1]);
        return y0 + 16;
    }
    sb_printf(b, "<text x=\"28\" y=\"%d\" font-size=\"11.5\" fill=\"" C_MUTED "\">linear-attention layers %s + %s host"
                 " \xC2\xB7 full-attention layers %s + %s host</text>\n", y0 + 21, k[0], k[2], k[1], k[3]);
    double lx = W - 28 - 250, ly = y0 + 21;
    legend_item(b, &lx, &ly, "#8A96A3", 0, "on device", NULL);
    legend_item(b, &lx, &ly, "#8A96A3", 1, "offloaded to host", NULL);
    return y0 + 33;
}

/* Bottom panel: checkpoint bytes per name, largest first, with a share bar; one colour per
 * name, solid on device and hatched on host. Returns the panel's bottom y. */
static int checkpoint_panel(doc *d, const hyla_plan *p, int y0)
{
    sbuf *b = &d->b;
    double total[HYLA_CK__COUNT + 1], dev = 0, host = 0;
    int order[HYLA_CK__COUNT + 1], m = checkpoint_order(p, total, order);
    for (int j = 0; j < m; j++)
        dev += clean(p->by_name[order[j]]), host += clean(p->host_by_name[order[j]]);
    double sum = dev + host;
    sb_printf(b, "<g id=\"checkpoints\">\n");
    int sy = checkpoint_heading(d, p, y0, dev, host);
    if (m == 0) {
        sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"13\" fill=\"" C_MUTED "\" text-anchor=\"middle\">"
                     "no checkpoints kept</text>\n</g>\n", W / 2, y0 + 36);
        return y0 + 56;
    }
    /* share bar: the same colours, in the same order */
    double x = 28, sw = W - 28 - 28;
    sb_printf(b, "<g id=\"share\">\n");
    for (int j = 0; j < m; j++) {
        int c = order[j];
        sb_printf(b, "<g><title>");
        sb_escaped(b, hyla_ckpt_name_str((hyla_ckpt_name)c));
        sb_printf(b, "</title>\n");
        split_bar(b, x, sy, clean(p->by_name[c]) / sum * sw, clean(p->host_by_name[c]) / sum * sw, 12, ck_color[c]);
        sb_printf(b, "</g>\n");
        x += total[c] / sum * sw;
    }
    sb_printf(b, "</g>\n");

    /* rows: swatch + name (the legend), bar, value */
    const int NX = 28, BX = 212, BMAX = PR - BX - (host > 0 ? 200 : 128);
    double vmax = total[order[0]];
    int ry = sy + 34;
    char s[32], h[32];
    for (int j = 0; j < m; j++, ry += ROW_H) {
        int c = order[j];
        double vd = clean(p->by_name[c]), vh = clean(p->host_by_name[c]), w = fmax(1.5, total[c] / vmax * BMAX);
        if (j % 2 == 0)
            sb_printf(b, "<rect x=\"20\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"4\" fill=\"#F5F7FA\"/>\n", ry - 16, W - 40,
                      ROW_H);
        sb_printf(b, "<g>\n<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" rx=\"3\" fill=\"%s\"/>\n", NX, ry - 10,
                  ck_color[c]);
        sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"12.5\" fill=\"" C_TEXT "\">", NX + 19, ry);
        sb_escaped(b, hyla_ckpt_name_str((hyla_ckpt_name)c));
        sb_printf(b, "</text>\n");
        split_bar(b, BX, ry - 12, w * vd / total[c], w * vh / total[c], 15, ck_color[c]);
        fmt_bytes(d->u, s, sizeof s, vd);
        fmt_bytes(d->u, h, sizeof h, vh);
        sb_printf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"12\" fill=\"" C_TEXT "\" font-weight=\"700\">", BX + w + 8, ry);
        if (vd > 0 && vh > 0)
            sb_printf(b, "%s + %s on host", s, h);
        else
            sb_printf(b, "%s%s", vh > 0 ? h : s, vh > 0 ? " on host" : "");
        sb_printf(b, " <tspan font-weight=\"400\" fill=\"" C_MUTED "\">%.1f%%</tspan></text>\n</g>\n", 100.0 * total[c] / sum);
    }
    sb_printf(b, "</g>\n");
    return ry - ROW_H + 20;
}

/* ---- documents --------------------------------------------------------------------------- */

/* Root element, shared paint, background and the drawn body, written atomically to path. */
static int write_doc(doc *d, int height, const char *title, const char *path)
{
    sbuf out = {0};
    sb_printf(&out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" " FONT ">\n",
              W, height, W, height);
    sb_printf(&out, "<title>");
    sb_escaped(&out, title);
    sb_printf(&out, "</title>\n%s<rect width=\"100%%\" height=\"100%%\" fill=\"#FFFFFF\"/>\n", DEFS);
    if (!d->b.oom && d->b.s) {
        sb_reserve(&out, d->b.len);
        if (!out.oom)
            memcpy(out.s + out.len, d->b.s, d->b.len + 1), out.len += d->b.len;
    }
    sb_printf(&out, "</svg>\n");
    int rc = out.oom || d->b.oom ? hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory building the SVG", path)
                                 : hyla_write_file_atomic(path, out.s, out.len);
    free(out.s);
    free(d->b.s);
    return rc;
}

/* "36.7 GB per device = argument 7.47 GB + temp 29.2 GB · 79.7 B parameters" */
static void plan_headline(doc *d, const hyla_plan *p)
{
    sbuf *b = &d->b;
    char tot[32], arg[32], tmp[32];
    fmt_bytes(d->u, tot, sizeof tot, clean(p->peak_bytes));
    fmt_bytes(d->u, arg, sizeof arg, clean(p->argument_bytes));
    fmt_bytes(d->u, tmp, sizeof tmp, clean(p->temp_bytes));
    sb_printf(b,
              "<text x=\"28\" y=\"64\" font-size=\"14\" fill=\"" C_TEXT "\"><tspan font-weight=\"700\">%s</tspan> per device"
              " <tspan fill=\"" C_MUTED "\">=</tspan> argument <tspan font-weight=\"700\">%s</tspan>"
              " <tspan fill=\"" C_MUTED "\">+</tspan> temp <tspan font-weight=\"700\">%s</tspan>",
              tot, arg, tmp);
    if (p->params > 0) {
        double n = (double)p->params;
        const char *u = n >= 1e9 ? "B" : n >= 1e6 ? "M" : "k";
        double k = n >= 1e9 ? 1e9 : n >= 1e6 ? 1e6 : 1e3;
        sb_printf(b, "<tspan dx=\"12\" fill=\"" C_MUTED "\">\xC2\xB7</tspan><tspan dx=\"12\" fill=\"" C_MUTED "\">%.*f %s"
                     " parameters</tspan>", n / k < 10 ? 2 : n / k < 100 ? 1 : 0, n / k, u);
    }
    sb_printf(b, "</text>\n");
}

int hyla_plan_write_svg(const hyla_plan *p, const char *title, const char *path)
{
    if (!p || !path || !*path)
        return hyla_error_set(HYLA_ERR_ARG, "plan svg: need a plan and an output path");
    doc d = {{0}, &DECIMAL};
    title = title && *title ? title : "hyla plan";
    header_title(&d.b, title);
    plan_headline(&d, p);
    int y = header_breakdown(&d, p, 86);
    step_view sv = {NULL, p->timeline, p->host_timeline, p->timeline ? p->n_timeline : 0, clean(p->peak_bytes), 0,
                    "plan total", NULL, "Device memory over one step", "Host memory: offloaded checkpoints",
                    "no activation timeline in this plan"};
    y = tiers_draw(&d, p, &sv, y);
    y = checkpoint_panel(&d, p, y + 44);
    return write_doc(&d, y + 22, title, path);
}

/* "12.3 MiB live on device at the peak, measured · plan predicted 12.3 MiB (exact) · step 45 ms" */
static void measured_headline(doc *d, double measured, double planned, double seconds, double host)
{
    sbuf *b = &d->b;
    char m[32], pl[32], t[32], diff[48] = "exact";
    fmt_bytes(d->u, m, sizeof m, measured);
    fmt_bytes(d->u, pl, sizeof pl, planned);
    fmt_seconds(t, sizeof t, seconds);
    if (measured != planned) {
        fmt_bytes(d->u, diff + 1, sizeof diff - 1, fabs(measured - planned));
        diff[0] = measured > planned ? '+' : '-';
    }
    sb_printf(b, "<text x=\"28\" y=\"64\" font-size=\"14\" fill=\"" C_TEXT "\"><tspan font-weight=\"700\">%s</tspan> live"
                 " on device at the peak, measured <tspan fill=\"" C_MUTED "\">\xC2\xB7</tspan> plan predicted"
                 " <tspan font-weight=\"700\">%s</tspan> <tspan fill=\"" C_MUTED "\">(%s)</tspan>"
                 " <tspan fill=\"" C_MUTED "\">\xC2\xB7</tspan> step <tspan font-weight=\"700\">%s</tspan>", m, pl, diff, t);
    if (host > 0) {
        fmt_bytes(d->u, m, sizeof m, host);
        sb_printf(b, " <tspan fill=\"" C_MUTED "\">\xC2\xB7</tspan> host peak <tspan font-weight=\"700\">%s</tspan>", m);
    }
    sb_printf(b, "</text>\n");
}

int hyla_measured_write_svg(const hyla_plan *plan, const double *seconds, const double *device, const double *host, int n,
                            const char *title, const char *path)
{
    if (!plan || !path || !*path || n < 0 || (n > 0 && (!seconds || !device)))
        return hyla_error_set(HYLA_ERR_ARG, "measured svg: need a plan, the samples and an output path");
    doc d = {{0}, &BINARY};
    title = title && *title ? title : "hyla train: measured step";
    band bands[5];
    int n_under;
    device_bands(plan, bands, &n_under);
    double under = 0;
    for (int k = 0; k < n_under; k++)
        under += clean(bands[k].bytes);
    double planned = under + max_of(plan->timeline, plan->n_timeline);
    header_title(&d.b, title);
    measured_headline(&d, under + max_of(device, n), planned, max_of(seconds, n), max_of(host, n));
    int y = header_breakdown(&d, plan, 86);
    step_view sv = {seconds, device, host, n, planned, max_of(plan->host_timeline, plan->n_timeline), "planned peak",
                    "planned peak", "Device memory over the measured step", "Host memory: offloaded checkpoints",
                    "no samples measured"};
    y = tiers_draw(&d, plan, &sv, y);
    y = checkpoint_panel(&d, plan, y + 44);
    return write_doc(&d, y + 22, title, path);
}
