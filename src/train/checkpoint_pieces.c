/* Sharded checkpoints from FSDP training (see checkpoint_pieces.h). */
#include "train/checkpoint_pieces.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/outdir.h"
#include "model/pieces.h"

int hyla_checkpoint_save_pieces(const char *dir, hyla_comm *comm, hyla_model *m, const hyla_fsdp *f,
                                const hyla_adamw *opt, const hyla_train_state *st)
{
    int N = comm->size, rank = comm->rank;
    hyla_outdir o;
    char tmp[sizeof o.tmp] = "";
    int begun = HYLA_OK;
    if (rank == 0 && (begun = hyla_outdir_begin(&o, dir, HYLA_OUTDIR_CHECKPOINT, "hyla train")) == HYLA_OK)
        snprintf(tmp, sizeof tmp, "%s", o.tmp);
    HYLA_TRY(comm->bcast(comm, tmp, sizeof tmp, 0)); /* "": rank 0 could not begin */
    int mine = tmp[0] ? hyla_pieces_write_rank(tmp, &m->table, &f->shard, N, rank, f->w, opt->m, opt->v) : HYLA_ERR_IO;
    char why[512];
    snprintf(why, sizeof why, "%s", hyla_error_message());
    int *all = calloc((size_t)N, sizeof *all);
    if (!all)
        return hyla_error_set(HYLA_ERR_NOMEM, "out of memory");
    int rc = comm->allgather(comm, &mine, all, sizeof mine);
    int failed = -1;
    for (int r = 0; rc == HYLA_OK && r < N && failed < 0; r++)
        failed = all[r] != HYLA_OK ? r : -1;
    free(all);
    HYLA_TRY(rc);
    int32_t result = HYLA_OK;
    if (rank == 0 && begun == HYLA_OK) {
        if (failed >= 0) {
            result = mine != HYLA_OK ? mine : hyla_error_set(HYLA_ERR_IO, "%s: rank %d could not write its pieces "
                                                             "(its own message says why); nothing was published", dir, failed);
        } else { /* after every rank's file: what makes the checkpoint loadable, the index last */
            hyla_model_set_save_dtype(m, m->compute_dtype == HYLA_DT_BF16 ? HYLA_DT_BF16 : HYLA_DT_F32);
            result = hyla_model_write_meta(m, tmp);
            if (result == HYLA_OK)
                result = hyla_checkpoint_write_state(tmp, opt, st);
            if (result == HYLA_OK)
                result = hyla_pieces_write_index(tmp, m, N, m->compute_dtype == HYLA_DT_BF16 ? HYLA_DT_BF16 : HYLA_DT_F32);
            if (result == HYLA_OK)
                result = hyla_outdir_commit(&o);
        }
        if (result != HYLA_OK)
            hyla_outdir_abort(&o);
    } else if (rank == 0) {
        result = begun;
    }
    HYLA_TRY(comm->bcast(comm, &result, sizeof result, 0));
    if (rank != 0 && result != HYLA_OK)
        return mine != HYLA_OK ? hyla_error_set(mine, "%s", why)
                               : hyla_error_set(result, "%s: rank 0 did not publish the checkpoint (its message says why)", dir);
    return result;
}

int hyla_checkpoint_resume_pieces(const char *dir, hyla_model *m, hyla_fsdp *f, hyla_adamw *opt, hyla_train_state *st)
{
    if (!m->pieces)
        return hyla_error_set(HYLA_ERR_ARG, "%s: not opened as a sharded checkpoint", dir);
    const hyla_param_table *t = &m->table;
    for (int i = 0; i < t->n_params; i++) {
        const hyla_param *p = &t->params[i];
        if (f) { /* this rank's pieces under the new rank count */
            const hyla_param *q = &f->shard.params[i];
            hyla_pieces_read(m->pieces, HYLA_PIECE_W, i, f->piece_elem0[i], q->numel, f->w + q->offset);
            hyla_pieces_read(m->pieces, HYLA_PIECE_M, i, f->piece_elem0[i], q->numel, opt->m + q->offset);
            hyla_pieces_read(m->pieces, HYLA_PIECE_V, i, f->piece_elem0[i], q->numel, opt->v + q->offset);
        } else {
            hyla_pieces_read(m->pieces, HYLA_PIECE_W, i, 0, p->numel, m->w + p->offset);
            hyla_pieces_read(m->pieces, HYLA_PIECE_M, i, 0, p->numel, opt->m + p->offset);
            hyla_pieces_read(m->pieces, HYLA_PIECE_V, i, 0, p->numel, opt->v + p->offset);
        }
    }
    hyla_model_close_pieces(m);
    if (!f)
        hyla_model_refresh_bf16(m); /* bf16 compute: the copy of the fp32 masters just read */
    return hyla_checkpoint_read_state_opt(dir, opt, st);
}
