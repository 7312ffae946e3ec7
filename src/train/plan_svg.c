/* hyla_plan_write_svg: a memory plan as one self-contained SVG (see plan_svg.h). */
#include "train/plan_svg.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/fileio.h"
#include "train/checkpoint_names.h"

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

/* "15.8 GB", "805 MB", "3.22 GB" (GB = 1e9 bytes, like the text report). */
static void fmt_bytes(char *out, size_t cap, double v)
{
    static const char *units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    int u = 0;
    while (u < 5 && fabs(v) >= 1000)
        v /= 1000, u++;
    if (u == 0)
        snprintf(out, cap, "%.0f B", v);
    else
        snprintf(out, cap, fabs(v) < 10 ? "%.2f %s" : fabs(v) < 100 ? "%.1f %s" : "%.0f %s", v, units[u]);
}

/* A 1-2-2.5-5 step near range / target. */
static double nice_step(double range, int target)
{
    if (!(range > 0))
        return 1;
    double raw = range / target, mag = pow(10, floor(log10(raw))), n = raw / mag;
    return (n <= 1 ? 1 : n <= 2 ? 2 : n <= 2.5 ? 2.5 : n <= 5 ? 5 : 10) * mag;
}

/* ---- palette ----------------------------------------------------------------------------- */

#define C_TEXT "#1F2933"
#define C_MUTED "#616E7C"
#define C_GRID "#E4E7EB"
#define C_AXIS "#9AA5B1"
#define C_PEAK "#C2410C"
#define C_ACT "#3D7DC4"
#define C_ACT_LINE "#1E4E8C"

/* Bands stacked under the activation curve, bottom first. */
enum { BAND_ARG, BAND_GRAD, BAND_GATHER, BAND_CARRY, N_BANDS };
static const char *band_color[N_BANDS] = {"#A3B1C6", "#E58F73", "#B79BDB", "#F2C55C"};
static const char *band_label[N_BANDS] = {"arguments", "gradients", "gathered weights", "carries"};

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

/* ---- layout ------------------------------------------------------------------------------ */

#define W 960
#define PL 84        /* plot left */
#define PR (W - 36)  /* plot right */
#define PW (PR - PL) /* plot width */
#define PT 196       /* plot top */
#define PH 300       /* plot height */
#define PB (PT + PH) /* plot bottom */
#define ROW_H 24

#define FONT "font-family=\"Helvetica Neue, Helvetica, Arial, DejaVu Sans, sans-serif\""

static double approx_text_w(const char *t, double size) { return (double)strlen(t) * size * 0.6; }

static void legend_item(sbuf *b, double *x, double y, const char *color, const char *label, const char *value)
{
    sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" rx=\"3\" fill=\"%s\"/>\n", *x, y - 10, color);
    sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"" C_TEXT "\">%s", *x + 17, y, label);
    if (value)
        sb_printf(b, " <tspan fill=\"" C_MUTED "\">%s</tspan>", value);
    sb_printf(b, "</text>\n");
    *x += 17 + approx_text_w(label, 12) + (value ? approx_text_w(value, 12) + 4 : 0) + 22;
}

static void header(sbuf *b, const hyla_plan *p, const char *title)
{
    char tot[32], arg[32], tmp[32];
    fmt_bytes(tot, sizeof tot, clean(p->peak_bytes));
    fmt_bytes(arg, sizeof arg, clean(p->argument_bytes));
    fmt_bytes(tmp, sizeof tmp, clean(p->temp_bytes));
    sb_printf(b, "<text x=\"28\" y=\"38\" font-size=\"21\" font-weight=\"700\" fill=\"" C_TEXT "\">");
    sb_escaped(b, title && *title ? title : "hyla plan");
    sb_printf(b, "</text>\n");
    sb_printf(b,
              "<text x=\"28\" y=\"64\" font-size=\"14\" fill=\"" C_TEXT "\"><tspan font-weight=\"700\">%s</tspan> per device"
              " <tspan fill=\"" C_MUTED "\">=</tspan> argument <tspan font-weight=\"700\">%s</tspan>"
              " <tspan fill=\"" C_MUTED "\">+</tspan> temp <tspan font-weight=\"700\">%s</tspan>",
              tot, arg, tmp);
    if (p->params > 0)
    {
        double n = (double)p->params;
        const char *u = n >= 1e9 ? "B" : n >= 1e6 ? "M" : "k";
        double d = n >= 1e9 ? 1e9 : n >= 1e6 ? 1e6 : 1e3;
        sb_printf(b, "<tspan dx=\"12\" fill=\"" C_MUTED "\">\xC2\xB7</tspan><tspan dx=\"12\" fill=\"" C_MUTED "\">%.*f %s"
                     " parameters</tspan>", n / d < 10 ? 2 : n / d < 100 ? 1 : 0, n / d, u);
    }
    sb_printf(b, "</text>\n");
    char v[7][32];
    const double parts[7] = {p->param_bytes, p->opt_bytes, p->batch_bytes, p->checkpoint_bytes, p->work_bytes, p->carry_bytes,
                             p->grad_bytes};
    for (int i = 0; i < 7; i++)
        fmt_bytes(v[i], sizeof v[i], clean(parts[i]));
    char g[32];
    fmt_bytes(g, sizeof g, clean(p->gathered_bytes));
    sb_printf(b, "<text x=\"28\" y=\"86\" font-size=\"11.5\" fill=\"" C_MUTED "\">argument = parameters %s + AdamW moments"
                 " %s + batch %s</text>\n", v[0], v[1], v[2]);
    sb_printf(b, "<text x=\"28\" y=\"102\" font-size=\"11.5\" fill=\"" C_MUTED "\">temp = checkpoints %s + working set %s"
                 " + carries %s + gradients %s + gathered weights %s</text>\n", v[3], v[4], v[5], v[6], g);
    sb_printf(b, "<line x1=\"28\" y1=\"116\" x2=\"%d\" y2=\"116\" stroke=\"" C_GRID "\" stroke-width=\"1\"/>\n", W - 28);
}

/* Top panel: bands + activation area over op index. */
static void timeline_panel(sbuf *b, const hyla_plan *p)
{
    double band[N_BANDS] = {clean(p->argument_bytes), clean(p->grad_bytes), clean(p->gathered_bytes), clean(p->carry_bytes)};
    double base = 0;
    for (int k = 0; k < N_BANDS; k++)
        base += band[k];
    int n = p->timeline ? p->n_timeline : 0;
    double tmax = 0;
    int at = 0;
    for (int i = 0; i < n; i++)
        if (clean(p->timeline[i]) > tmax)
            tmax = clean(p->timeline[i]), at = i;
    double total = clean(p->peak_bytes), top = fmax(base + tmax, total);
    double step = nice_step(top > 0 ? top * 1.06 : 1, 6), ymax = ceil((top > 0 ? top * 1.06 : 1) / step) * step;
    if (step < 1) /* no fractional bytes on the axis */
        step = 1, ymax = ceil(ymax);
    if (ymax < step)
        ymax = step;

    sb_printf(b, "<text x=\"28\" y=\"142\" font-size=\"15\" font-weight=\"700\" fill=\"" C_TEXT "\">Memory over one step</text>\n");
    double lx = 28;
    char v[32];
    legend_item(b, &lx, 166, C_ACT, "live activations", NULL);
    for (int k = N_BANDS - 1; k >= 0; k--)
        if (band[k] > 0) {
            fmt_bytes(v, sizeof v, band[k]);
            legend_item(b, &lx, 166, band_color[k], band_label[k], v);
        }

    /* plot background, grid and y ticks */
    sb_printf(b, "<g id=\"timeline\">\n");
    sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#FAFBFC\"/>\n", PL, PT, PW, PH);
    double unit = ymax >= 1e9 ? 1e9 : ymax >= 1e6 ? 1e6 : ymax >= 1e3 ? 1e3 : 1;
    const char *uname = unit == 1e9 ? "GB" : unit == 1e6 ? "MB" : unit == 1e3 ? "kB" : "B";
    int dec = 0;
    while (dec < 3 && fabs(step / unit * pow(10, dec) - round(step / unit * pow(10, dec))) > 1e-6)
        dec++;
#define YPOS(val) (PB - (val) / ymax * PH)
    sb_printf(b, "<g font-size=\"11\" fill=\"" C_MUTED "\" text-anchor=\"end\">\n");
    for (int t = 0; t * step <= ymax * (1 + 1e-9); t++) {
        double yv = t * step, y = YPOS(yv);
        if (t > 0)
            sb_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"" C_GRID "\"/>\n", PL, y, PR, y);
        sb_printf(b, "<text x=\"%d\" y=\"%.1f\">%.*f %s</text>\n", PL - 8, y + 4, dec, yv / unit, uname);
    }
    sb_printf(b, "</g>\n");

    /* x ticks: op index */
    double xstep = nice_step(n > 1 ? n - 1 : 1, 10);
    if (xstep < 1)
        xstep = 1;
#define XPOS(i) (n > 1 ? PL + (double)(i) / (n - 1) * PW : PL + PW / 2.0)
    sb_printf(b, "<g font-size=\"11\" fill=\"" C_MUTED "\" text-anchor=\"middle\">\n");
    for (double t = 0; n > 0 && t <= n - 1; t += xstep) {
        double x = XPOS(t);
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"" C_AXIS "\"/>\n", x, PB, x, PB + 5);
        sb_printf(b, "<text x=\"%.1f\" y=\"%d\">%.0f</text>\n", x, PB + 18, t);
    }
    sb_printf(b, "</g>\n");
    sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"12\" fill=\"" C_MUTED "\" text-anchor=\"middle\">op index"
                 " (%d ops, forward then backward)</text>\n", PL + PW / 2, PB + 38, n);

    /* flat bands */
    double acc = 0;
    sb_printf(b, "<g id=\"bands\">\n");
    for (int k = 0; k < N_BANDS; k++) {
        if (band[k] <= 0)
            continue;
        double y0 = YPOS(acc + band[k]), y1 = YPOS(acc);
        sb_printf(b, "<rect x=\"%d\" y=\"%.2f\" width=\"%d\" height=\"%.2f\" fill=\"%s\"/>\n", PL, y0, PW, y1 - y0,
                  band_color[k]);
        acc += band[k];
    }
    sb_printf(b, "</g>\n");

    if (n > 0) {
        /* activation area on top of the bands; long timelines keep each pixel column's min and max */
        sbuf pts = {0};
        if (n <= 2 * PW) {
            for (int i = 0; i < n; i++)
                sb_printf(&pts, "%s%.1f,%.1f", i ? " " : "", XPOS(i), YPOS(base + clean(p->timeline[i])));
        } else {
            for (int c = 0; c < PW; c++) {
                int i0 = (int)((long long)c * n / PW), i1 = (int)((long long)(c + 1) * n / PW);
                int lo = i0, hi = i0;
                for (int i = i0; i < i1; i++) {
                    if (clean(p->timeline[i]) < clean(p->timeline[lo]))
                        lo = i;
                    if (clean(p->timeline[i]) > clean(p->timeline[hi]))
                        hi = i;
                }
                int a = lo < hi ? lo : hi, z = lo < hi ? hi : lo;
                sb_printf(&pts, "%s%.1f,%.1f %.1f,%.1f", c ? " " : "", XPOS(a), YPOS(base + clean(p->timeline[a])), XPOS(z),
                          YPOS(base + clean(p->timeline[z])));
            }
        }
        if (pts.oom) {
            free(pts.s);
            b->oom = 1;
            return;
        }
        sb_printf(b, "<path d=\"M%.1f,%.1f L%s L%.1f,%.1f Z\" fill=\"url(#actfill)\"/>\n", XPOS(0), YPOS(base), pts.s,
                  XPOS(n - 1), YPOS(base));
        sb_printf(b, "<polyline points=\"%s\" fill=\"none\" stroke=\"" C_ACT_LINE "\" stroke-width=\"1.4\""
                     " stroke-linejoin=\"round\"/>\n", pts.s);
        free(pts.s);
    }

    /* axes */
    sb_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"" C_AXIS "\"/>\n", PL, PB, PR, PB);
    sb_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"" C_AXIS "\"/>\n", PL, PT, PL, PB);

    /* the plan's total (argument + temp) */
    if (total > 0) {
        char s[32];
        fmt_bytes(s, sizeof s, total);
        double y = YPOS(total);
        sb_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"" C_TEXT "\" stroke-width=\"1\""
                     " stroke-dasharray=\"2 3\" opacity=\"0.7\"/>\n", PL, y, PR, y);
        sb_printf(b, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" fill=\"" C_TEXT "\" text-anchor=\"end\">plan total %s</text>\n",
                  PR - 4, y - 5, s);
    }

    if (n > 0) {
        /* forward / backward boundary: the timeline's maximum */
        double xp = XPOS(at), yp = YPOS(base + tmax);
        sb_printf(b, "<g id=\"peak\">\n");
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"" C_PEAK "\" stroke-width=\"1.5\""
                     " stroke-dasharray=\"5 4\"/>\n", xp, PT - 4, xp, PB);
        sb_printf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"12\" font-weight=\"700\" fill=\"" C_PEAK "\""
                     " text-anchor=\"middle\">peak</text>\n", xp, PT - 8);
        if (xp - PL > 90)
            sb_printf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"11.5\" fill=\"" C_MUTED "\" text-anchor=\"end\">"
                         "\xE2\x97\x80 forward</text>\n", xp - 26, PT - 8);
        if (PR - xp > 90)
            sb_printf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"11.5\" fill=\"" C_MUTED "\">backward"
                         " \xE2\x96\xB6</text>\n", xp + 26, PT - 8);
        sb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"#FFFFFF\" stroke=\"" C_PEAK "\" stroke-width=\"2\"/>\n",
                  xp, yp);
        char s1[32], s2[32], s3[32];
        fmt_bytes(s1, sizeof s1, base + tmax);
        fmt_bytes(s2, sizeof s2, tmax);
        fmt_bytes(s3, sizeof s3, base);
        char l1[96], l2[96];
        snprintf(l1, sizeof l1, "%s live at op %d", s1, at);
        snprintf(l2, sizeof l2, "activations %s + %s below", s2, s3);
        double bw = fmax(approx_text_w(l1, 12.5), approx_text_w(l2, 11)) + 18, bh = 40;
        char ts[32], tl[64];
        fmt_bytes(ts, sizeof ts, total);
        snprintf(tl, sizeof tl, "plan total %s", ts);
        double tlx = PR - 4 - approx_text_w(tl, 11) - 6;
        /* place the label beside the peak where it hides the least of the curve */
        double bx = xp + 14, by = PT + 4, best = 1e300;
        for (int side = 0; side < 2; side++) {
            double cx = side ? xp - 14 - bw : xp + 14;
            if (cx < PL + 4 || cx + bw > PR - 4)
                continue;
            for (double cy = PT + 4; cy + bh <= PB - 4; cy += 4) {
                double hidden = 0;
                int i0 = n > 1 ? (int)fmax(0, floor((cx - PL) / PW * (n - 1))) : 0;
                int i1 = n > 1 ? (int)fmin(n - 1, ceil((cx + bw - PL) / PW * (n - 1))) : 0;
                for (int i = i0; i <= i1; i++) { /* how much of the box the area fills */
                    double yc = YPOS(base + clean(p->timeline[i]));
                    hidden += fmax(0, cy + bh - fmax(cy, yc)) / bh;
                }
                double cost = hidden * PW / n + fabs(cy - yp) * 0.08 + side * 2;
                if (total > 0 && cx + bw > tlx && cy < YPOS(total) && cy + bh > YPOS(total) - 18)
                    cost += 1e6; /* keep "plan total" readable */
                if (cost < best)
                    best = cost, bx = cx, by = cy;
            }
        }
        if (best == 1e300) /* too narrow on both sides: below the peak */
            bx = fmin(fmax(xp - bw / 2, PL + 4), PR - 4 - bw), by = fmin(yp + 14, PB - 4 - bh);
        sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" rx=\"6\" fill=\"#FFFFFF\""
                     " fill-opacity=\"0.93\" stroke=\"" C_PEAK "\" stroke-width=\"1\"/>\n", bx, by, bw, bh);
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12.5\" font-weight=\"700\" fill=\"" C_PEAK "\">%s</text>\n",
                  bx + 9, by + 17, l1);
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"" C_MUTED "\">%s</text>\n", bx + 9, by + 32, l2);
        sb_printf(b, "</g>\n");
    } else {
        sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"13\" fill=\"" C_MUTED "\" text-anchor=\"middle\">"
                     "no activation timeline in this plan</text>\n", PL + PW / 2, PT + PH / 2);
    }
    sb_printf(b, "</g>\n");
#undef XPOS
#undef YPOS
}

/* Bottom panel: kept checkpoint bytes per name, largest first. Returns the panel's bottom y. */
static int checkpoint_panel(sbuf *b, const hyla_plan *p, int y0, const int *order, int m, double sum)
{
    char s[32], k0[32], k1[32];
    fmt_bytes(s, sizeof s, sum);
    sb_printf(b, "<g id=\"checkpoints\">\n");
    sb_printf(b, "<text x=\"28\" y=\"%d\" font-size=\"15\" font-weight=\"700\" fill=\"" C_TEXT "\">Kept checkpoints by name"
                 " <tspan font-weight=\"400\" fill=\"" C_MUTED "\">%s in all layers</tspan></text>\n", y0, s);
    fmt_bytes(k0, sizeof k0, clean(p->by_kind[0]));
    fmt_bytes(k1, sizeof k1, clean(p->by_kind[1]));
    sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"11.5\" fill=\"" C_MUTED "\" text-anchor=\"end\">linear-attention layers"
                 " %s \xC2\xB7 full-attention layers %s</text>\n", W - 28, y0, k0, k1);
    if (m == 0) {
        sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"13\" fill=\"" C_MUTED "\" text-anchor=\"middle\">"
                     "no checkpoints kept</text>\n</g>\n", W / 2, y0 + 36);
        return y0 + 56;
    }
    /* share bar: the same colours, in the same order */
    int sy = y0 + 16;
    double x = 28, sw = W - 28 - 28;
    sb_printf(b, "<g id=\"share\">\n");
    for (int j = 0; j < m; j++) {
        double w = clean(p->by_name[order[j]]) / sum * sw;
        sb_printf(b, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"12\" fill=\"%s\" stroke=\"#FFFFFF\""
                     " stroke-width=\"1\"><title>", x, sy, w, ck_color[order[j]]);
        sb_escaped(b, hyla_ckpt_name_str((hyla_ckpt_name)order[j]));
        sb_printf(b, "</title></rect>\n");
        x += w;
    }
    sb_printf(b, "</g>\n");

    /* rows: swatch + name (the legend), bar, value */
    const int NX = 28, BX = 212, BMAX = PR - BX - 128;
    double vmax = clean(p->by_name[order[0]]);
    int ry = sy + 34;
    for (int j = 0; j < m; j++, ry += ROW_H) {
        int c = order[j];
        double v = clean(p->by_name[c]), w = vmax > 0 ? v / vmax * BMAX : 0;
        if (w < 1.5)
            w = 1.5;
        fmt_bytes(s, sizeof s, v);
        if (j % 2 == 0)
            sb_printf(b, "<rect x=\"20\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"4\" fill=\"#F5F7FA\"/>\n", ry - 16, W - 40,
                      ROW_H);
        sb_printf(b, "<g>\n<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" rx=\"3\" fill=\"%s\"/>\n", NX, ry - 10,
                  ck_color[c]);
        sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"12.5\" fill=\"" C_TEXT "\">", NX + 19, ry);
        sb_escaped(b, hyla_ckpt_name_str((hyla_ckpt_name)c));
        sb_printf(b, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"15\" rx=\"3\" fill=\"%s\"/>\n", BX, ry - 12, w,
                  ck_color[c]);
        sb_printf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"12\" fill=\"" C_TEXT "\" font-weight=\"700\">%s"
                     " <tspan font-weight=\"400\" fill=\"" C_MUTED "\">%.1f%%</tspan></text>\n</g>\n",
                  BX + w + 8, ry, s, 100.0 * v / sum);
    }
    sb_printf(b, "</g>\n");
    return ry - ROW_H + 20;
}

int hyla_plan_write_svg(const hyla_plan *p, const char *title, const char *path)
{
    if (!p || !path || !*path)
        return hyla_error_set(HYLA_ERR_ARG, "plan svg: need a plan and an output path");
    /* checkpoint names with bytes, largest first (ties: enum order) */
    int order[HYLA_CK__COUNT + 1], m = 0;
    double sum = 0;
    for (int c = 0; c <= HYLA_CK__COUNT; c++)
        if (clean(p->by_name[c]) > 0)
            order[m++] = c, sum += clean(p->by_name[c]);
    for (int i = 1; i < m; i++)
        for (int j = i; j > 0 && clean(p->by_name[order[j]]) > clean(p->by_name[order[j - 1]]); j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    int y0 = PB + 84;
    int height = (m ? y0 + 16 + 34 + (m - 1) * ROW_H + 20 : y0 + 56) + 22;

    sbuf b = {0};
    sb_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" " FONT ">\n", W,
              height, W, height);
    sb_printf(&b, "<title>");
    sb_escaped(&b, title && *title ? title : "hyla plan");
    sb_printf(&b, "</title>\n");
    sb_printf(&b, "<defs>\n<linearGradient id=\"actfill\" x1=\"0\" y1=\"0\" x2=\"0\" y2=\"1\">\n"
                  "<stop offset=\"0\" stop-color=\"" C_ACT "\" stop-opacity=\"0.92\"/>\n"
                  "<stop offset=\"1\" stop-color=\"" C_ACT "\" stop-opacity=\"0.55\"/>\n"
                  "</linearGradient>\n</defs>\n");
    sb_printf(&b, "<rect width=\"100%%\" height=\"100%%\" fill=\"#FFFFFF\"/>\n");
    header(&b, p, title);
    timeline_panel(&b, p);
    checkpoint_panel(&b, p, y0, order, m, sum);
    sb_printf(&b, "</svg>\n");
    if (b.oom) {
        free(b.s);
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory building the SVG", path);
    }
    int rc = hyla_write_file_atomic(path, b.s, b.len);
    free(b.s);
    return rc;
}
