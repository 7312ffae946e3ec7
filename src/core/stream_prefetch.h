/* The prefetch of a weight stream that a decode reads once per token (quantized and bf16 GEMV
 * kernels): each line is asked for twice, from memory into the L2 HYLA_PREFETCH_L2_AHEAD bytes
 * ahead of where the kernel reads, and from the L2 into the L1 HYLA_PREFETCH_L1_AHEAD bytes ahead.
 * Measured on the Intel Xeon VM (2 threads; core/quant_avx512.c has the figures): with one prefetch
 * into the L2 the kernels' loads waited on L2 hits. Not non-temporal: a prefetchnta there held an L1
 * fill buffer through a whole DRAM latency (half the rate). Past a matrix's end a prefetch is a
 * no-op that cannot fault. The L1 distance was 2 KB until stop 44: in a phase where the VM's memory
 * read 21-26 GB/s (another tenant busy; ~34 when calm) whole decodes (bench/ab_decode.sh, alternating
 * windows against 2 KB) ran +2.5% / +3.5% (0.8B Q4_K_M), +1.6% (0.8B Q8_0), +1.8% (MoE Q4_K_M and
 * Q8_0), +2.2% (0.8B bf16) with 4 KB; 6 or 8 KB +1.7-2.2%; 16, 24, 48 or 64 KB into the L2 with 4 KB
 * into the L1 no better than 32. */
#ifndef HYLA_CORE_STREAM_PREFETCH_H
#define HYLA_CORE_STREAM_PREFETCH_H

#define HYLA_PREFETCH_L2_AHEAD 32768
#define HYLA_PREFETCH_L1_AHEAD 4096

/* the lines HYLA_PREFETCH_L2_AHEAD and HYLA_PREFETCH_L1_AHEAD bytes past p (locality 2 and 3: on x86
 * prefetcht1 and prefetcht0) */
static inline __attribute__((always_inline)) void hyla_prefetch_stream(const void *p)
{
    __builtin_prefetch((const char *)p + HYLA_PREFETCH_L2_AHEAD, 0, 2);
    __builtin_prefetch((const char *)p + HYLA_PREFETCH_L1_AHEAD, 0, 3);
}

#endif
