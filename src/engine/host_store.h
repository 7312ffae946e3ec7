/* The host tier for offloaded checkpoints (DESIGN §3): a file-backed store served by one
 * background I/O thread.
 *
 * The compute thread submits copies (device buffer -> store offset, and back) and gets a ticket;
 * the I/O thread runs them in submission order, so waiting for ticket t means every copy
 * submitted up to t is done. This is the shape of a GPU copy stream with events: a port keeps
 * the executor and swaps this file for pinned host memory and cudaMemcpyAsync.
 *
 * The store's offsets are planned by the executor (a stack mirroring the checkpoint arena); the
 * store only checks them against its size limit. Submitting never allocates. The first I/O error
 * is sticky: every later wait returns it, naming the path, offset and the system's reason. */
#ifndef HYLA_ENGINE_HOST_STORE_H
#define HYLA_ENGINE_HOST_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct hyla_host_store_s hyla_host_store;
typedef uint64_t hyla_xfer_ticket; /* 0: nothing to wait for */

typedef struct {
    double io_seconds;      /* time the I/O thread spent copying */
    double wait_seconds;    /* time the compute thread spent blocked in hyla_host_store_wait */
    uint64_t bytes_written, bytes_read;
    uint64_t writes, reads; /* copies */
} hyla_host_store_stats;

/* Open a store of at most `limit` bytes (0: no limit). path NULL: an anonymous file in $TMPDIR
 * (or /tmp). A new regular file is unlinked as soon as it is open, so nothing is left behind;
 * an existing regular file is refused (never overwritten); an existing device (a raw disk
 * partition) is used as is. Errors name the path. */
int hyla_host_store_open(hyla_host_store **out, const char *path, size_t limit);
void hyla_host_store_close(hyla_host_store *s); /* waits for queued copies; NULL is fine */

const char *hyla_host_store_path(const hyla_host_store *s);
size_t hyla_host_store_limit(const hyla_host_store *s);
/* Make sure `bytes` can be stored: within the limit, and for a regular file the space is
 * reserved now (so a full disk fails here, not in the middle of a step). */
int hyla_host_store_reserve(hyla_host_store *s, size_t bytes);

hyla_xfer_ticket hyla_host_store_write(hyla_host_store *s, size_t offset, const void *src, size_t bytes);
hyla_xfer_ticket hyla_host_store_read(hyla_host_store *s, size_t offset, void *dst, size_t bytes);
/* bf16 copies: `values` fp32 values that hold bf16 values, stored as 2 * values bytes (packed on
 * the way out, widened on the way back: exact). A GPU port casts on the device before its copy. */
hyla_xfer_ticket hyla_host_store_write_bf16(hyla_host_store *s, size_t offset, const float *src, size_t values);
hyla_xfer_ticket hyla_host_store_read_bf16(hyla_host_store *s, size_t offset, float *dst, size_t values);
/* Block until ticket t (and everything before it) is done. HYLA_OK, or the first I/O error. */
int hyla_host_store_wait(hyla_host_store *s, hyla_xfer_ticket t);
/* Block until the queue is empty (errors are not reported here; see hyla_host_store_wait). */
void hyla_host_store_drain(hyla_host_store *s);

void hyla_host_store_stats_get(const hyla_host_store *s, hyla_host_store_stats *out);
void hyla_host_store_stats_reset(hyla_host_store *s);

#endif
