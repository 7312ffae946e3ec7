/* Output directories (models, checkpoints) published atomically, and only over hyla's own.
 *
 * Every command that writes a directory goes through here:
 *   hyla_outdir_begin  checks the destination DIR: it may be absent, an empty directory, or a
 *                      directory hyla wrote of the same kind (marker file hyla-output.json);
 *                      anything else (a user's folder, a file, a symlink, a checkpoint where a
 *                      model is written) is refused, so nothing a user owns is replaced. It
 *                      removes stale DIR.tmp.<pid> directories left by killed runs (the pid is
 *                      no longer running and the directory holds hyla's marker or nothing), then
 *                      creates DIR.tmp.<our pid> holding the marker.
 *   (the caller writes its files into o->tmp)
 *   hyla_outdir_commit exchanges DIR.tmp.<pid> with DIR in one rename (at no instant is there
 *                      no complete DIR), removes the previous contents, syncs the parent.
 *   hyla_outdir_abort  removes the partial DIR.tmp.<pid>.
 * A kill at any point leaves DIR as it was or complete and new; the next begin cleans up. */
#ifndef HYLA_IO_OUTDIR_H
#define HYLA_IO_OUTDIR_H

#define HYLA_OUTDIR_MARKER "hyla-output.json"

typedef enum { HYLA_OUTDIR_MODEL = 0, HYLA_OUTDIR_CHECKPOINT = 1 } hyla_outdir_kind;

typedef struct {
    char final[4096]; /* DIR, trailing slashes removed */
    char tmp[4160];   /* DIR.tmp.<pid>, where the caller writes */
    hyla_outdir_kind kind;
} hyla_outdir;

int hyla_outdir_begin(hyla_outdir *o, const char *dir, hyla_outdir_kind kind, const char *writer);
int hyla_outdir_commit(hyla_outdir *o);
/* The destination check and stale-temporary cleanup of hyla_outdir_begin alone, so a long run
 * refuses a bad --save before it starts rather than after it trained (and a run with nothing
 * left to do still cleans up after a killed one). */
int hyla_outdir_check(const char *dir, hyla_outdir_kind kind);
void hyla_outdir_abort(hyla_outdir *o);

/* Kind of a directory hyla wrote: 0 model, 1 checkpoint; -1 if DIR does not carry the marker
 * (a checkpoint from before the marker is recognised by its trainer_state.json). */
int hyla_outdir_kind_of(const char *dir);
const char *hyla_outdir_kind_name(hyla_outdir_kind kind);

#endif
