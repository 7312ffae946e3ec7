/* The one-process communicator: every collective over one rank is a copy (or nothing). */
#include "parallel/comm.h"

#include <stdlib.h>
#include <string.h>

static int self_copy(hyla_comm *c, const void *send, void *recv, size_t bytes)
{
    (void)c;
    if (send != recv)
        memmove(recv, send, bytes);
    return 0;
}
static int self_alltoallv(hyla_comm *c, const void *send, const size_t *scount, const size_t *sdispl, void *recv,
                          const size_t *rcount, const size_t *rdispl)
{
    memmove((char *)recv + rdispl[0], (const char *)send + sdispl[0], scount[0] < rcount[0] ? scount[0] : rcount[0]);
    return 0;
}
static int self_allgatherv(hyla_comm *c, const void *send, void *recv, const size_t *count, const size_t *displ)
{
    if ((const char *)recv + displ[0] != send)
        memmove((char *)recv + displ[0], send, count[0]);
    return 0;
}
static int self_iallgatherv(hyla_comm *c, const void *send, void *recv, const size_t *count, const size_t *displ,
                            void **req)
{
    *req = NULL;
    return self_allgatherv(c, send, recv, count, displ);
}
static int self_ialltoallv(hyla_comm *c, const void *send, const size_t *scount, const size_t *sdispl, void *recv,
                           const size_t *rcount, const size_t *rdispl, void **req)
{
    *req = NULL;
    return self_alltoallv(c, send, scount, sdispl, recv, rcount, rdispl);
}
static int self_wait(hyla_comm *c, void *req) { return 0; }
static int self_test(hyla_comm *c, void *req, int *done)
{
    *done = 1;
    return 0;
}
static int self_bcast(hyla_comm *c, void *buf, size_t bytes, int root) { return 0; }
static int self_barrier(hyla_comm *c) { return 0; }
static void self_abort(hyla_comm *c, int code) { exit(code); }
static void self_close(hyla_comm *c) {}
static int self_isend(hyla_comm *c, const void *buf, size_t bytes, int to, int tag, void **req)
{
    *req = NULL; /* one rank: nobody to send to (callers never send to themselves) */
    return 0;
}
static int self_recv(hyla_comm *c, void *buf, size_t bytes, int from, int tag) { return 0; }
static int self_split(hyla_comm *c, int color, int key, hyla_comm **out)
{
    *out = c; /* one rank: itself (close does nothing) */
    return 0;
}

hyla_comm *hyla_comm_self(void)
{
    static hyla_comm self = {0,          1,           NULL,          self_copy,          self_copy,
                             self_bcast, self_alltoallv, self_allgatherv, self_iallgatherv, self_ialltoallv,
                             self_wait,  self_test,      self_barrier,    self_abort,       self_split,
                             self_close, self_isend,     self_recv,       0,                0.0};
    return &self;
}

void hyla_comm_stats_reset(hyla_comm *c)
{
    c->bytes_sent = 0;
    c->seconds = 0.0;
}
