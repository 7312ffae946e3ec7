/* hyla train's progress display and end-of-run summary. */
#include <math.h>
#include <stdio.h>
#include <unistd.h>

#include "cli/train_args.h"
#include "core/profile.h"

static void clock_text(double s, char *out, size_t cap)
{
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(out, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(out, cap, "%ld:%02ld", t / 60, t % 60);
}

void train_progress_start(train_progress *p, int64_t first_step)
{
    p->tty = isatty(STDOUT_FILENO);
    p->t0 = hyla_now();
    p->first_step = first_step;
    p->tokens = 0;
    p->best = INFINITY, p->best_step = 0, p->last = NAN;
}

double train_hidden_fraction(const hyla_step_stats *s)
{
    if (s->copy_seconds <= 0)
        return 1.0;
    double h = 1.0 - s->copy_wait_seconds / s->copy_seconds;
    return h < 0 ? 0 : h;
}

void train_progress_step(train_progress *p, const train_args *a, int64_t step, const hyla_step_stats *s,
                         double activation_mib)
{
    p->tokens += s->tokens;
    p->last = s->loss;
    if (s->loss < p->best)
        p->best = s->loss, p->best_step = step;
    if (p->tty) { /* one line, rewritten in place */
        double elapsed = hyla_now() - p->t0, per = elapsed / (double)(step - p->first_step);
        char el[32], eta[32];
        clock_text(elapsed, el, sizeof el);
        clock_text(per * (double)(a->steps - step), eta, sizeof eta);
        printf("\r\033[Kstep %lld/%lld  loss %.4f  %.0f tok/s  %s elapsed  ETA %s", (long long)step, (long long)a->steps,
               s->loss, s->tokens / s->seconds, el, eta);
        return;
    }
    printf("step %5lld/%lld  loss %.4f", (long long)step, (long long)a->steps, s->loss);
    if (!isnan(s->aux) || !isnan(s->mtp)) {
        printf(" (ce %.4f", s->ce);
        if (!isnan(s->aux))
            printf(" aux %.3f", s->aux);
        if (!isnan(s->mtp))
            printf(" mtp %.4f", s->mtp);
        printf(")");
    }
    printf("  lr %.2e  gnorm %.3f  %.0f tok/s  act %.1f MiB", s->lr, s->grad_norm, s->tokens / s->seconds, activation_mib);
    if (s->offload_bytes)
        printf("  offload %.1f MiB, copies %.0f ms, %.0f%% hidden", s->offload_bytes / 1048576.0, s->copy_seconds * 1e3,
               100.0 * train_hidden_fraction(s));
    printf("\n");
}

void train_progress_note(train_progress *p)
{
    if (p->tty)
        printf("\n");
}

void train_progress_end(train_progress *p, const train_args *a, int64_t steps_done)
{
    if (p->tty)
        printf("\n");
    int64_t ran = steps_done - p->first_step;
    if (ran <= 0)
        return;
    double t = hyla_now() - p->t0;
    char el[32];
    clock_text(t, el, sizeof el);
    printf("done: %lld steps (%lld this run), %lld tokens in %s (%.0f tokens/s); final loss %.4f, best %.4f at step %lld",
           (long long)steps_done, (long long)ran, (long long)p->tokens, el, p->tokens / (t > 0 ? t : 1e-9), p->last,
           p->best, (long long)p->best_step);
    if (a->save)
        printf("; checkpoint: %s", a->save);
    printf("\n");
}
