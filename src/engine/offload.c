/* Offloaded checkpoints inside the executor: staging, writes, read-back (see executor.h for
 * the scheme and host_store.h for the store). */
#include "engine/offload.h"

#include <stdint.h>
#include <string.h>

#include "core/error.h"

#define HOST_OFF(ex, l, s) ((ex)->host_off[(size_t)(l) * HYLA_S__COUNT + (size_t)(s)])
#define WRITTEN(ex, l, s) ((ex)->offl_written[(size_t)(l) * HYLA_S__COUNT + (size_t)(s)])

static void io_check(hyla_executor *ex, int status)
{
    if (status != HYLA_OK && ex->io_status == HYLA_OK)
        ex->io_status = status;
}

void hyla_offload_reuse_half(hyla_executor *ex, int h, hyla_xfer_ticket pending)
{
    if (!ex->dry && pending)
        io_check(ex, hyla_host_store_wait(ex->store, pending));
    hyla_arena_reset_to(&ex->xfer[h], 0);
}

float *hyla_offload_stage(hyla_executor *ex, int owner, hyla_slot s, int64_t floats, int h)
{
    size_t bytes = hyla_align_up((size_t)floats * (hyla_executor_stores_bf16(ex, s) ? sizeof(uint16_t) : sizeof(float)));
    HOST_OFF(ex, owner, s) = (size_t)((uintptr_t)hyla_arena_alloc(&ex->host, bytes) - HYLA_ALIGN); /* dry: offsets */
    WRITTEN(ex, owner, s) = 0;
    if (ex->dry) {
        hyla_executor_count_dtype(ex, s, bytes);
        ex->offloaded_bytes_by_name[hyla_slot_ckpt(s)] += bytes;
        ex->offloaded_bytes_by_kind[ex->m->cfg.layer_kind[owner] == HYLA_LAYER_FULL] += bytes;
    }
    return hyla_arena_floats(&ex->xfer[h], (size_t)floats);
}

void hyla_offload_write(hyla_executor *ex, int l, hyla_slot s)
{
    int owner = l;
    if (s == HYLA_S_Y) {
        if (l + 1 >= ex->m->cfg.n_layers)
            return; /* the trunk's final hidden, the MTP layer's output: no layer's input */
        owner = l + 1, s = HYLA_S_X;
    }
    if (HOST_OFF(ex, owner, s) == SIZE_MAX || WRITTEN(ex, owner, s))
        return;
    WRITTEN(ex, owner, s) = 1;
    if (ex->dry)
        return;
    size_t floats = (size_t)hyla_slot_floats(&ex->m->cfg, owner, s, ex->n);
    ex->write_ticket[l & 1] = hyla_executor_stores_bf16(ex, s)
                                  ? hyla_host_store_write_bf16(ex->store, HOST_OFF(ex, owner, s), ex->tapes[owner].p[s], floats)
                                  : hyla_host_store_write(ex->store, HOST_OFF(ex, owner, s), ex->tapes[owner].p[s],
                                                          floats * sizeof(float));
}

/* Calls fn(ex, l, s) for every offloaded slot unit u reads back: its ops' outputs and the input
 * X of a layer whose op 0 it contains. */
#define FOR_UNIT_OFFLOADED(ex, un, l, s, body)                                                     \
    for (int l = (un)->layer0; l <= (un)->layer1; l++) {                                           \
        int i0_ = l == (un)->layer0 ? (un)->op0 : 0, i1_ = l == (un)->layer1 ? (un)->op1 : (ex)->n_ops[l]; \
        if (i0_ == 0 && HOST_OFF(ex, l, HYLA_S_X) != SIZE_MAX) {                                   \
            hyla_slot s = HYLA_S_X;                                                                \
            body;                                                                                  \
        }                                                                                          \
        for (int i_ = i0_; i_ < i1_; i_++)                                                         \
            for (int o_ = 0; o_ < (ex)->ops[l][i_]->n_out; o_++) {                                 \
                hyla_slot s = (ex)->ops[l][i_]->out[o_];                                           \
                if (s != HYLA_S_Y && HOST_OFF(ex, l, s) != SIZE_MAX)                               \
                    body;                                                                          \
            }                                                                                      \
    }

void hyla_offload_prefetch_unit(hyla_executor *ex, int u)
{
    if (u < 0 || !ex->host.high_water) /* (the planning pass sets host_bytes only at its end) */
        return;
    const hyla_unit *un = &ex->units[u];
    int h = u & 1;
    hyla_offload_reuse_half(ex, h, 0); /* its previous user, unit u + 2, is done */
    FOR_UNIT_OFFLOADED(ex, un, l, s, {
        if (!ex->fetched[l].p[s]) {
            int64_t floats = hyla_slot_floats(&ex->m->cfg, l, s, ex->n);
            ex->fetched[l].p[s] = hyla_arena_floats(&ex->xfer[h], (size_t)floats);
            if (!ex->dry && hyla_executor_stores_bf16(ex, s))
                ex->read_ticket[h] = hyla_host_store_read_bf16(ex->store, HOST_OFF(ex, l, s), ex->fetched[l].p[s], (size_t)floats);
            else if (!ex->dry)
                ex->read_ticket[h] = hyla_host_store_read(ex->store, HOST_OFF(ex, l, s), ex->fetched[l].p[s],
                                                          (size_t)floats * sizeof(float));
        }
    })
}

int hyla_offload_activate_unit(hyla_executor *ex, int u)
{
    if (!ex->host.high_water)
        return HYLA_OK;
    const hyla_unit *un = &ex->units[u];
    if (!ex->dry && ex->read_ticket[u & 1])
        io_check(ex, hyla_host_store_wait(ex->store, ex->read_ticket[u & 1]));
    FOR_UNIT_OFFLOADED(ex, un, l, s, {
        if (ex->fetched[l].p[s]) {
            ex->tapes[l].p[s] = ex->fetched[l].p[s];
            ex->fetched[l].p[s] = NULL;
        }
    })
    return ex->io_status;
}

void hyla_offload_reset(hyla_executor *ex)
{
    size_t L = (size_t)ex->n_layers;
    memset(ex->fetched, 0, sizeof(hyla_tape) * L);
    memset(ex->host_off, 0xff, L * HYLA_S__COUNT * sizeof(size_t)); /* SIZE_MAX: not offloaded */
    memset(ex->write_ticket, 0, sizeof ex->write_ticket);
    memset(ex->read_ticket, 0, sizeof ex->read_ticket);
    ex->io_status = HYLA_OK;
    for (int h = 0; h < 2; h++)
        hyla_arena_reset_to(&ex->xfer[h], 0);
    hyla_arena_reset_to(&ex->host, 0);
}

void hyla_offload_begin_backward(hyla_executor *ex)
{
    if (!ex->host.high_water)
        return;
    for (int h = 0; h < 2; h++) /* every write done, both halves free */
        hyla_offload_reuse_half(ex, h, ex->write_ticket[h]);
    hyla_offload_prefetch_unit(ex, ex->n_units - 1);
    hyla_offload_prefetch_unit(ex, ex->n_units - 2);
}
