// tiled_decode's kernel: attention of a few new queries against a long KV cache, read once.
//
// A work item is (batch element b, kv head h, key range [k0, k1)). Its tile holds every query row
// that reads kv head h: the G = H / Hkv query heads of the group times the Tq new queries, R = G * Tq
// rows. For each block of keys, the scores of all R rows are computed against the block's K rows
// (each K row loaded once from memory, reused from L1 by the rows), the online softmax updates the
// running max and sum, and the block's V rows update the R accumulators. An item ends with its
// normalised partial output and log-sum-exp (base 2); ``merge`` combines the items of one (b, h)
// by log-sum-exp (flash-decoding's split-KV), so a long cache is split across threads when there
// are fewer (b, h) than threads.
//
// Keys are reached through one row pointer per key, so a contiguous cache (B, Hkv, Tk, d) and a
// paged one (pages (P, Hkv, page, d) and a block table (B, pages per sequence)) run the same loops.
// Threads: the Python side runs one ``work`` call per worker thread; each pulls items from a shared
// counter (an int64 tensor, fetch-and-add), so ragged caches balance themselves. The code is
// compiled for AVX2 + FMA (the baseline the build picks; never -march=native).
#include <torch/extension.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "_flash_exp2.h"

namespace {

constexpr int BLOCK = 64;  // keys per block: the K and V rows of a block stay in L1/L2 while R rows use them
constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
int g_prefetch = 2;        // 0 none, 1 T0, 2 T1, 3 T2
int g_block = BLOCK;       // keys per block (<= BLOCK)
int64_t g_ahead_bytes = 8192;  // how far ahead of the rows in use each of K and V is prefetched
int64_t g_warm_blocks = 2;     // paged caches: how many blocks ahead the pages' translations are warmed

struct Problem {
  const float* q;
  int64_t qs[4];  // strides of q (B, H, Tq, d)
  const float* k;
  const float* v;
  int64_t ks[4];  // strides of k: (B, Hkv, Tk, d), or pages (P, Hkv, page, d)
  int64_t vs[4];
  const int32_t* table;  // block table (B, per_seq) or null
  int64_t per_seq;
  int64_t page;  // 0: contiguous
  const int64_t* lens;  // valid keys per batch element
  int64_t tq, g, d, dp;
  float scale_log2;
  bool causal, bottom_right;
  int64_t wl, wr;  // window (left, right); wl < 0: none
};

inline float hsum(__m256 x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i tail_mask(int64_t n) {  // lanes 0..n-1 on
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lanes);
}

// S[r][j] = Q[r] . K_j for RR rows x KK keys: RR * KK accumulators, each K chunk loaded once.
template <int RR, int KK>
inline void scores_tile(const float* q, int64_t dp, const float* const* kp, int64_t d, float* s, int64_t ld) {
  __m256 acc[RR][KK];
  #pragma GCC unroll 16
  for (int r = 0; r < RR; ++r)
    #pragma GCC unroll 16
    for (int j = 0; j < KK; ++j) acc[r][j] = _mm256_setzero_ps();
  const int64_t d8 = d & ~int64_t(7);
  for (int64_t c = 0; c < d8; c += 8) {
    __m256 kv[KK];
    #pragma GCC unroll 16
    for (int j = 0; j < KK; ++j) kv[j] = _mm256_loadu_ps(kp[j] + c);
    #pragma GCC unroll 16
    for (int r = 0; r < RR; ++r) {
      const __m256 qv = _mm256_loadu_ps(q + r * dp + c);
      #pragma GCC unroll 16
      for (int j = 0; j < KK; ++j) acc[r][j] = _mm256_fmadd_ps(qv, kv[j], acc[r][j]);
    }
  }
  if (d8 < d) {  // the last d % 8 columns: masked loads never read past a row
    const __m256i m = tail_mask(d - d8);
    __m256 kv[KK];
    #pragma GCC unroll 16
    for (int j = 0; j < KK; ++j) kv[j] = _mm256_maskload_ps(kp[j] + d8, m);
    #pragma GCC unroll 16
    for (int r = 0; r < RR; ++r) {
      const __m256 qv = _mm256_loadu_ps(q + r * dp + d8);  // zero-padded to dp
      #pragma GCC unroll 16
      for (int j = 0; j < KK; ++j) acc[r][j] = _mm256_fmadd_ps(qv, kv[j], acc[r][j]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < RR; ++r)
    #pragma GCC unroll 16
    for (int j = 0; j < KK; ++j) s[r * ld + j] = hsum(acc[r][j]);
}

// One row's cache lines, into the cache level g_prefetch names. A row's bytes need not start on a line.
// Inline assembly, not _mm_prefetch: GCC 12 at -O3 deletes a loop whose only statements are prefetch
// builtins (they have no side effects it must keep), and did so here, silently.
inline void prefetch_row(const float* row, int64_t bytes) {
  if (row == nullptr || g_prefetch == 0) return;
  const uintptr_t first = reinterpret_cast<uintptr_t>(row) & ~uintptr_t(63);
  const uintptr_t last = reinterpret_cast<uintptr_t>(row) + static_cast<uintptr_t>(bytes) - 1;
  for (uintptr_t line = first; line <= last; line += 64) {
    const char* at = reinterpret_cast<const char*>(line);
    if (g_prefetch == 1) asm volatile("prefetcht0 (%0)" : : "r"(at));
    else if (g_prefetch == 2) asm volatile("prefetcht1 (%0)" : : "r"(at));
    else asm volatile("prefetcht2 (%0)" : : "r"(at));
  }
}

// Shuffled pages put every page of a sequence in a different place, each a TLB miss whose page walk is not
// cached (a contiguous cache's walks read neighbouring entries); one line per 4 KiB of the pages that keys
// [from, to) live on is prefetched a few blocks early so that the walks are done before the rows are needed.
inline void warm_pages(const Problem& P, int64_t b, int64_t h, int64_t from, int64_t to) {
  const int64_t bytes = P.page * P.ks[2] * static_cast<int64_t>(sizeof(float));
  for (int64_t index = from / P.page; index * P.page < to; ++index) {
    const int64_t slot = P.table[b * P.per_seq + index];
    const char* kpage = reinterpret_cast<const char*>(P.k + slot * P.ks[0] + h * P.ks[1]);
    const char* vpage = reinterpret_cast<const char*>(P.v + slot * P.vs[0] + h * P.vs[1]);
    for (int64_t off = 0; off < bytes; off += 4096) {
      asm volatile("prefetcht2 (%0)" : : "r"(kpage + off));
      asm volatile("prefetcht2 (%0)" : : "r"(vpage + off));
    }
  }
}

// ``ahead[j]`` is the K row a fixed distance past key j (null past the end): it is prefetched while key j's
// tile is computed, so each stream keeps a steady number of lines in flight instead of bursts per block.
template <int RR>
inline void scores_rows(const float* q, int64_t dp, const float* const* kp, int64_t nk, int64_t d, float* s, int64_t ld,
                        const float* const* ahead, int64_t bytes) {
  int64_t j = 0;
  for (; j + 3 <= nk; j += 3) {
    if (ahead)
      for (int64_t i = j; i < j + 3; ++i) prefetch_row(ahead[i], bytes);
    scores_tile<RR, 3>(q, dp, kp + j, d, s + j, ld);
  }
  if (ahead)
    for (int64_t i = j; i < nk; ++i) prefetch_row(ahead[i], bytes);
  if (nk - j == 2) scores_tile<RR, 2>(q, dp, kp + j, d, s + j, ld);
  if (nk - j == 1) scores_tile<RR, 1>(q, dp, kp + j, d, s + j, ld);
}

void scores(const float* q, int64_t rows, int64_t dp, const float* const* kp, int64_t nk, int64_t d, float* s,
            const float* const* ahead, int64_t bytes) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4, ahead = nullptr) scores_rows<4>(q + r * dp, dp, kp, nk, d, s + r * BLOCK, BLOCK, ahead, bytes);
  switch (rows - r) {
    case 3: scores_rows<3>(q + r * dp, dp, kp, nk, d, s + r * BLOCK, BLOCK, ahead, bytes); break;
    case 2: scores_rows<2>(q + r * dp, dp, kp, nk, d, s + r * BLOCK, BLOCK, ahead, bytes); break;
    case 1: scores_rows<1>(q + r * dp, dp, kp, nk, d, s + r * BLOCK, BLOCK, ahead, bytes); break;
    default: break;
  }
}

// acc[r][c0 : c0 + 8 CW] += sum_j P[r][j] V_j[c0 : ...] for RR rows: accumulators in registers over the block.
template <int RR, int CW>
inline void pv_tile(const float* p, const float* const* vp, int64_t nk, int64_t c0, int64_t d, float* acc, int64_t dp,
                    const float* const* ahead, int64_t bytes) {
  __m256 a[RR][CW];
  #pragma GCC unroll 16
  for (int r = 0; r < RR; ++r)
    #pragma GCC unroll 16
    for (int c = 0; c < CW; ++c) a[r][c] = _mm256_loadu_ps(acc + r * dp + c0 + 8 * c);
  const bool tail = c0 + 8 * CW > d;
  const __m256i m = tail_mask(d - (c0 + 8 * (CW - 1)));
  for (int64_t j = 0; j < nk; ++j) {
    if (ahead) prefetch_row(ahead[j], bytes);
    __m256 vv[CW];
    #pragma GCC unroll 16
    for (int c = 0; c < CW; ++c)
      vv[c] = (tail && c == CW - 1) ? _mm256_maskload_ps(vp[j] + c0 + 8 * c, m) : _mm256_loadu_ps(vp[j] + c0 + 8 * c);
    #pragma GCC unroll 16
    for (int r = 0; r < RR; ++r) {
      const __m256 pr = _mm256_broadcast_ss(p + r * BLOCK + j);
      #pragma GCC unroll 16
      for (int c = 0; c < CW; ++c) a[r][c] = _mm256_fmadd_ps(pr, vv[c], a[r][c]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < RR; ++r)
    #pragma GCC unroll 16
    for (int c = 0; c < CW; ++c) _mm256_storeu_ps(acc + r * dp + c0 + 8 * c, a[r][c]);
}

// ``ahead`` as in scores_rows, for V: prefetched by the first pass over the block only.
template <int RR>
inline void pv_rows(const float* p, const float* const* vp, int64_t nk, int64_t d, int64_t dp, float* acc,
                    const float* const* ahead, int64_t bytes) {
  int64_t c0 = 0;
  for (; c0 + 16 <= dp; c0 += 16, ahead = nullptr) pv_tile<RR, 2>(p, vp, nk, c0, d, acc, dp, ahead, bytes);
  if (c0 < dp) pv_tile<RR, 1>(p, vp, nk, c0, d, acc, dp, ahead, bytes);
}

void pv(const float* p, int64_t rows, const float* const* vp, int64_t nk, int64_t d, int64_t dp, float* acc,
        const float* const* ahead, int64_t bytes) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4, ahead = nullptr) pv_rows<4>(p + r * BLOCK, vp, nk, d, dp, acc + r * dp, ahead, bytes);
  switch (rows - r) {
    case 3: pv_rows<3>(p + r * BLOCK, vp, nk, d, dp, acc + r * dp, ahead, bytes); break;
    case 2: pv_rows<2>(p + r * BLOCK, vp, nk, d, dp, acc + r * dp, ahead, bytes); break;
    case 1: pv_rows<1>(p + r * BLOCK, vp, nk, d, dp, acc + r * dp, ahead, bytes); break;
    default: break;
  }
}


// ---- AVX-512 (chosen at run time when the CPU has AVX512F; compiled per function, never -march=native) ----
// 32 registers: a tile of 4 rows x 4 keys for the scores, and whole rows of d <= 128 for P V, so each V row
// streams once, in order, per pair of rows.
#define AVX512 __attribute__((target("avx512f")))


// Lane i of the result is the sum of the 16 lanes of input i: about 45 instructions for what 16 separate
// reductions do in about 130 (the scores' horizontal sums were as costly as their FMAs).
AVX512 inline __m512 pair_sum(__m512 x, __m512 y) {  // per 128-bit lane: [x0+x2, y0+y2, x1+x3, y1+y3]
  return _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y));
}

AVX512 inline __m512 quad_sum(__m512 a, __m512 b) {  // per lane: the lane sums of the 4 inputs behind a and b
  const __m512d x = _mm512_castps_pd(a), y = _mm512_castps_pd(b);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
}

AVX512 inline __m512 reduce16(__m512 a0, __m512 a1, __m512 a2, __m512 a3, __m512 a4, __m512 a5, __m512 a6, __m512 a7,
                              __m512 a8, __m512 a9, __m512 a10, __m512 a11, __m512 a12, __m512 a13, __m512 a14,
                              __m512 a15) {
  const __m512 u0 = quad_sum(pair_sum(a0, a1), pair_sum(a2, a3));
  const __m512 u1 = quad_sum(pair_sum(a4, a5), pair_sum(a6, a7));
  const __m512 u2 = quad_sum(pair_sum(a8, a9), pair_sum(a10, a11));
  const __m512 u3 = quad_sum(pair_sum(a12, a13), pair_sum(a14, a15));
  const __m512 w01 = _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, 0x44), _mm512_shuffle_f32x4(u0, u1, 0xEE));
  const __m512 w23 = _mm512_add_ps(_mm512_shuffle_f32x4(u2, u3, 0x44), _mm512_shuffle_f32x4(u2, u3, 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88), _mm512_shuffle_f32x4(w01, w23, 0xDD));
}

template <int RR, int KK>
AVX512 inline void scores_tile512(const float* q, int64_t dp, const float* const* kp, int64_t d, float* s, int64_t ld) {
  __m512 acc[RR][KK];
  #pragma GCC unroll 16
  for (int r = 0; r < RR; ++r)
    #pragma GCC unroll 16
    for (int j = 0; j < KK; ++j) acc[r][j] = _mm512_setzero_ps();
  const int64_t d16 = d & ~int64_t(15);
  for (int64_t c = 0; c < d16; c += 16) {
    __m512 kv[KK];
    #pragma GCC unroll 16
    for (int j = 0; j < KK; ++j) kv[j] = _mm512_loadu_ps(kp[j] + c);
    #pragma GCC unroll 16
    for (int r = 0; r < RR; ++r) {
      const __m512 qv = _mm512_loadu_ps(q + r * dp + c);
      #pragma GCC unroll 16
      for (int j = 0; j < KK; ++j) acc[r][j] = _mm512_fmadd_ps(qv, kv[j], acc[r][j]);
    }
  }
  if (d16 < d) {
    const __mmask16 m = static_cast<__mmask16>((1u << (d - d16)) - 1u);
    __m512 kv[KK];
    #pragma GCC unroll 16
    for (int j = 0; j < KK; ++j) kv[j] = _mm512_maskz_loadu_ps(m, kp[j] + d16);
    #pragma GCC unroll 16
    for (int r = 0; r < RR; ++r) {
      const __m512 qv = _mm512_loadu_ps(q + r * dp + d16);
      #pragma GCC unroll 16
      for (int j = 0; j < KK; ++j) acc[r][j] = _mm512_fmadd_ps(qv, kv[j], acc[r][j]);
    }
  }
  if constexpr (RR == 4 && KK == 4) {  // the full tile: 16 horizontal sums at once by a transpose tree
    const __m512 sums = reduce16(acc[0][0], acc[0][1], acc[0][2], acc[0][3], acc[1][0], acc[1][1], acc[1][2],
                                 acc[1][3], acc[2][0], acc[2][1], acc[2][2], acc[2][3], acc[3][0], acc[3][1],
                                 acc[3][2], acc[3][3]);
    _mm_storeu_ps(s, _mm512_extractf32x4_ps(sums, 0));
    _mm_storeu_ps(s + ld, _mm512_extractf32x4_ps(sums, 1));
    _mm_storeu_ps(s + 2 * ld, _mm512_extractf32x4_ps(sums, 2));
    _mm_storeu_ps(s + 3 * ld, _mm512_extractf32x4_ps(sums, 3));
    return;
  }
  #pragma GCC unroll 16
  for (int r = 0; r < RR; ++r)
    #pragma GCC unroll 16
    for (int j = 0; j < KK; ++j) s[r * ld + j] = _mm512_reduce_add_ps(acc[r][j]);
}

template <int RR>
AVX512 inline void scores_rows512(const float* q, int64_t dp, const float* const* kp, int64_t nk, int64_t d, float* s,
                                  int64_t ld, const float* const* ahead, int64_t bytes) {
  int64_t j = 0;
  for (; j + 4 <= nk; j += 4) {
    if (ahead)
      for (int64_t i = j; i < j + 4; ++i) prefetch_row(ahead[i], bytes);
    scores_tile512<RR, 4>(q, dp, kp + j, d, s + j, ld);
  }
  if (ahead)
    for (int64_t i = j; i < nk; ++i) prefetch_row(ahead[i], bytes);
  switch (nk - j) {
    case 3: scores_tile512<RR, 3>(q, dp, kp + j, d, s + j, ld); break;
    case 2: scores_tile512<RR, 2>(q, dp, kp + j, d, s + j, ld); break;
    case 1: scores_tile512<RR, 1>(q, dp, kp + j, d, s + j, ld); break;
    default: break;
  }
}

AVX512 void scores512(const float* q, int64_t rows, int64_t dp, const float* const* kp, int64_t nk, int64_t d, float* s,
                      const float* const* ahead, int64_t bytes) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4, ahead = nullptr) scores_rows512<4>(q + r * dp, dp, kp, nk, d, s + r * BLOCK, BLOCK, ahead, bytes);
  switch (rows - r) {
    case 3: scores_rows512<3>(q + r * dp, dp, kp, nk, d, s + r * BLOCK, BLOCK, ahead, bytes); break;
    case 2: scores_rows512<2>(q + r * dp, dp, kp, nk, d, s + r * BLOCK, BLOCK, ahead, bytes); break;
    case 1: scores_rows512<1>(q + r * dp, dp, kp, nk, d, s + r * BLOCK, BLOCK, ahead, bytes); break;
    default: break;
  }
}

// acc[r][c0 : c0 + 16 CW] += sum_j P[r][j] V_j[c0 : ...]: RR rows of up to 128 columns held in registers.
template <int RR, int CW>
AVX512 inline void pv_tile512(const float* p, const float* const* vp, int64_t nk, int64_t c0, int64_t d, float* acc,
                              int64_t dp, const float* const* ahead, int64_t bytes) {
  __m512 a[RR][CW];
  #pragma GCC unroll 16
  for (int r = 0; r < RR; ++r)
    #pragma GCC unroll 16
    for (int c = 0; c < CW; ++c) a[r][c] = _mm512_loadu_ps(acc + r * dp + c0 + 16 * c);
  const int64_t last = d - (c0 + 16 * (CW - 1));  // columns of the last register that exist (may be < 16)
  const __mmask16 m = last >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << last) - 1u);
  for (int64_t j = 0; j < nk; ++j) {
    if (ahead) prefetch_row(ahead[j], bytes);
    __m512 pr[RR];
    #pragma GCC unroll 16
    for (int r = 0; r < RR; ++r) pr[r] = _mm512_set1_ps(p[r * BLOCK + j]);
    #pragma GCC unroll 16
    for (int c = 0; c < CW; ++c) {
      const __m512 vv = _mm512_maskz_loadu_ps(c == CW - 1 ? m : static_cast<__mmask16>(0xFFFF), vp[j] + c0 + 16 * c);
      #pragma GCC unroll 16
      for (int r = 0; r < RR; ++r) a[r][c] = _mm512_fmadd_ps(pr[r], vv, a[r][c]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < RR; ++r)
    #pragma GCC unroll 16
    for (int c = 0; c < CW; ++c) _mm512_storeu_ps(acc + r * dp + c0 + 16 * c, a[r][c]);
}

template <int RR>
AVX512 inline void pv_rows512(const float* p, const float* const* vp, int64_t nk, int64_t d, int64_t dp, float* acc,
                              const float* const* ahead, int64_t bytes) {
  for (int64_t c0 = 0; c0 < dp; c0 += 128, ahead = nullptr) {
    switch (std::min<int64_t>(8, (dp - c0) / 16)) {
      case 8: pv_tile512<RR, 8>(p, vp, nk, c0, d, acc, dp, ahead, bytes); break;
      case 7: pv_tile512<RR, 7>(p, vp, nk, c0, d, acc, dp, ahead, bytes); break;
      case 6: pv_tile512<RR, 6>(p, vp, nk, c0, d, acc, dp, ahead, bytes); break;
      case 5: pv_tile512<RR, 5>(p, vp, nk, c0, d, acc, dp, ahead, bytes); break;
      case 4: pv_tile512<RR, 4>(p, vp, nk, c0, d, acc, dp, ahead, bytes); break;
      case 3: pv_tile512<RR, 3>(p, vp, nk, c0, d, acc, dp, ahead, bytes); break;
      case 2: pv_tile512<RR, 2>(p, vp, nk, c0, d, acc, dp, ahead, bytes); break;
      default: pv_tile512<RR, 1>(p, vp, nk, c0, d, acc, dp, ahead, bytes); break;
    }
  }
}

AVX512 void pv512(const float* p, int64_t rows, const float* const* vp, int64_t nk, int64_t d, int64_t dp, float* acc,
                  const float* const* ahead, int64_t bytes) {
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2, ahead = nullptr) pv_rows512<2>(p + r * BLOCK, vp, nk, d, dp, acc + r * dp, ahead, bytes);
  if (r < rows) pv_rows512<1>(p + r * BLOCK, vp, nk, d, dp, acc + r * dp, ahead, bytes);
}

bool g_avx512 = __builtin_cpu_supports("avx512f");  // tune() may turn it off (tests run both paths)

// Keys [lo, hi) query t of element b may attend (hi <= lo: none).
inline void row_range(const Problem& P, int64_t len, int64_t t, int64_t* lo, int64_t* hi) {
  const int64_t i = t + (P.bottom_right ? len - P.tq : 0);  // the query's position in key coordinates
  int64_t a = 0, z = len;
  if (P.causal) z = std::min(z, i + 1);
  if (P.wl >= 0) {
    a = std::max<int64_t>(a, i - P.wl);
    z = std::min(z, i + P.wr + 1);
  }
  *lo = a;
  *hi = z;
}

struct Scratch {
  std::vector<float> q, s, acc, m, l;
  std::vector<int64_t> lo, hi;
  std::vector<const float*> kp, vp, kn, vn, ka, va;  // rows of this block, the next, and `ahead` on
};

void run_item(const Problem& P, int64_t b, int64_t h, int64_t k0, int64_t k1, float* out_o, float* out_lse, Scratch& w) {
  const int64_t rows = P.g * P.tq, dp = P.dp, d = P.d;
  w.q.assign(rows * dp, 0.0f);
  w.acc.assign(rows * dp, 0.0f);
  w.s.resize(rows * BLOCK);
  w.m.assign(rows, NEG_INF);
  w.l.assign(rows, 0.0f);
  w.lo.resize(rows);
  w.hi.resize(rows);
  w.kp.resize(BLOCK);
  w.vp.resize(BLOCK);
  const int64_t len = P.lens[b];
  int64_t all_lo = k1, all_hi = k0;  // keys every row may attend: blocks inside need no mask
  int64_t min_lo = k1, max_hi = k0;
  for (int64_t gi = 0; gi < P.g; ++gi) {
    for (int64_t t = 0; t < P.tq; ++t) {
      const int64_t r = gi * P.tq + t;
      const float* src = P.q + b * P.qs[0] + (h * P.g + gi) * P.qs[1] + t * P.qs[2];
      for (int64_t c = 0; c < d; ++c) w.q[r * dp + c] = src[c * P.qs[3]] * P.scale_log2;
      row_range(P, len, t, &w.lo[r], &w.hi[r]);
      if (r == 0) {
        all_lo = w.lo[r];
        all_hi = w.hi[r];
      }
      all_lo = std::max(all_lo, w.lo[r]);
      all_hi = std::min(all_hi, w.hi[r]);
      min_lo = std::min(min_lo, w.lo[r]);
      max_hi = std::max(max_hi, w.hi[r]);
    }
  }
  k0 = std::max(k0, min_lo);
  k1 = std::min(k1, max_hi);
  auto pointers = [&](int64_t kb, const float** kp, const float** vp) {  // row pointers of keys kb.., paged or not
    const int64_t nk = std::min<int64_t>(g_block, k1 - kb);
    if (P.page) {  // walk the pages: one division per block, not two per key
      int64_t index = kb / P.page, slot = kb % P.page;
      const float* kpage = P.k + P.table[b * P.per_seq + index] * P.ks[0] + h * P.ks[1];
      const float* vpage = P.v + P.table[b * P.per_seq + index] * P.vs[0] + h * P.vs[1];
      for (int64_t j = 0; j < nk; ++j) {
        if (slot == P.page) {
          slot = 0;
          ++index;
          kpage = P.k + P.table[b * P.per_seq + index] * P.ks[0] + h * P.ks[1];
          vpage = P.v + P.table[b * P.per_seq + index] * P.vs[0] + h * P.vs[1];
        }
        kp[j] = kpage + slot * P.ks[2];
        vp[j] = vpage + slot * P.vs[2];
        ++slot;
      }
    } else {
      const float* krow = P.k + b * P.ks[0] + h * P.ks[1] + kb * P.ks[2];
      const float* vrow = P.v + b * P.vs[0] + h * P.vs[1] + kb * P.vs[2];
      for (int64_t j = 0; j < nk; ++j) {
        kp[j] = krow + j * P.ks[2];
        vp[j] = vrow + j * P.vs[2];
      }
    }
    return nk;
  };
  w.kn.resize(BLOCK);
  w.vn.resize(BLOCK);
  w.ka.resize(BLOCK);
  w.va.resize(BLOCK);
  if (k0 < k1) pointers(k0, w.kp.data(), w.vp.data());
  const int64_t row_bytes = d * static_cast<int64_t>(sizeof(float));
  const int64_t ahead = std::min<int64_t>(g_block, std::max<int64_t>(1, g_ahead_bytes / row_bytes));
  for (int64_t kb = k0; kb < k1; kb += g_block) {
    const int64_t nk = std::min<int64_t>(g_block, k1 - kb);
    const int64_t nn = kb + g_block < k1 ? pointers(kb + g_block, w.kn.data(), w.vn.data()) : 0;
    if (P.page && g_prefetch && g_warm_blocks)
      warm_pages(P, b, h, kb + g_warm_blocks * g_block, std::min(k1, kb + (g_warm_blocks + 1) * g_block));
    for (int64_t j = 0; g_prefetch && j < nk; ++j) {  // the rows ``ahead`` keys on, in this block or the next
      const int64_t i = j + ahead;
      w.ka[j] = i < nk ? w.kp[i] : i - nk < nn ? w.kn[i - nk] : nullptr;
      w.va[j] = i < nk ? w.vp[i] : i - nk < nn ? w.vn[i - nk] : nullptr;
    }
    const float* const* ka = g_prefetch ? w.ka.data() : nullptr;
    const float* const* va = g_prefetch ? w.va.data() : nullptr;
    if (g_avx512)
      scores512(w.q.data(), rows, dp, w.kp.data(), nk, d, w.s.data(), ka, row_bytes);
    else
      scores(w.q.data(), rows, dp, w.kp.data(), nk, d, w.s.data(), ka, row_bytes);
    const bool masked = !(kb >= all_lo && kb + nk <= all_hi);
    for (int64_t r = 0; r < rows; ++r) {
      float* s = w.s.data() + r * BLOCK;
      if (masked) {
        for (int64_t j = 0; j < nk; ++j)
          if (kb + j < w.lo[r] || kb + j >= w.hi[r]) s[j] = NEG_INF;
      }
      float mb = NEG_INF;
      for (int64_t j = 0; j < nk; ++j) mb = std::max(mb, s[j]);
      const float m_new = std::max(w.m[r], mb);
      if (m_new == NEG_INF) {  // no allowed key yet: nothing to add
        for (int64_t j = 0; j < nk; ++j) s[j] = 0.0f;
        continue;
      }
      const float alpha = w.m[r] == m_new ? 1.0f : exp2_nonpositive(w.m[r] - m_new);  // 0 when m was -inf
      float sum = 0.0f;
      int64_t j = 0;
      const __m256 mv = _mm256_set1_ps(m_new);
      __m256 sv = _mm256_setzero_ps();
      for (; j + 8 <= nk; j += 8) {
        const __m256 e = exp2_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
        _mm256_storeu_ps(s + j, e);
        sv = _mm256_add_ps(sv, e);
      }
      sum = hsum(sv);
      for (; j < nk; ++j) {
        s[j] = exp2_nonpositive(s[j] - m_new);
        sum += s[j];
      }
      if (alpha != 1.0f) {
        float* a = w.acc.data() + r * dp;
        for (int64_t c = 0; c < dp; ++c) a[c] *= alpha;
      }
      w.l[r] = w.l[r] * alpha + sum;
      w.m[r] = m_new;
    }
    if (g_avx512)
      pv512(w.s.data(), rows, w.vp.data(), nk, d, dp, w.acc.data(), va, row_bytes);
    else
      pv(w.s.data(), rows, w.vp.data(), nk, d, dp, w.acc.data(), va, row_bytes);
    std::swap(w.kp, w.kn);
    std::swap(w.vp, w.vn);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float l = w.l[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t c = 0; c < d; ++c) out_o[r * d + c] = w.acc[r * dp + c] * inv;
    out_lse[r] = l > 0.0f ? w.m[r] + std::log2(l) : NEG_INF;
  }
}

Problem problem(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                const c10::optional<torch::Tensor>& table, const torch::Tensor& lens, int64_t tq, int64_t g,
                double scale_log2, bool causal, bool bottom_right, int64_t wl, int64_t wr) {
  TORCH_CHECK(q.scalar_type() == torch::kFloat32 && k.scalar_type() == torch::kFloat32 &&
              v.scalar_type() == torch::kFloat32, "tiled_decode's kernel takes float32");
  TORCH_CHECK(k.stride(3) == 1 && v.stride(3) == 1, "k and v need contiguous rows");
  Problem P;
  P.q = q.data_ptr<float>();
  P.k = k.data_ptr<float>();
  P.v = v.data_ptr<float>();
  for (int i = 0; i < 4; ++i) {
    P.qs[i] = q.stride(i);
    P.ks[i] = k.stride(i);
    P.vs[i] = v.stride(i);
  }
  P.table = table.has_value() ? table->data_ptr<int32_t>() : nullptr;
  P.per_seq = table.has_value() ? table->size(1) : 0;
  P.page = table.has_value() ? k.size(2) : 0;
  P.lens = lens.data_ptr<int64_t>();
  P.tq = tq;
  P.g = g;
  P.d = q.size(3);
  P.dp = (P.d + 15) & ~int64_t(15);  // rows padded to whole AVX-512 registers
  P.scale_log2 = static_cast<float>(scale_log2);
  P.causal = causal;
  P.bottom_right = bottom_right;
  P.wl = wl;
  P.wr = wr;
  return P;
}

}  // namespace

// Items (n, 4) = (b, h, k0, k1): each (b, h)'s attended keys cut into pieces of at most ``chunk``,
// the longest first. Rows with no attended key get no item (merge writes zeros).
torch::Tensor plan(torch::Tensor lens, int64_t hkv, int64_t tq, bool causal, bool bottom_right, int64_t wl,
                   int64_t wr, int64_t chunk) {
  const int64_t* n = lens.data_ptr<int64_t>();
  std::vector<std::array<int64_t, 4>> items;
  for (int64_t b = 0; b < lens.size(0); ++b) {
    const int64_t off = bottom_right ? n[b] - tq : 0;
    int64_t lo = 0, hi = n[b];
    if (causal) hi = std::min(hi, std::max<int64_t>(0, tq - 1 + off + 1));
    if (wl >= 0) {
      lo = std::max<int64_t>(lo, off - wl);
      hi = std::min(hi, tq - 1 + off + wr + 1);
    }
    if (hi <= lo) continue;
    const int64_t pieces = (hi - lo + chunk - 1) / chunk, size = (hi - lo + pieces - 1) / pieces;
    for (int64_t h = 0; h < hkv; ++h)
      for (int64_t k0 = lo; k0 < hi; k0 += size) items.push_back({b, h, k0, std::min(hi, k0 + size)});
  }
  std::stable_sort(items.begin(), items.end(), [](const auto& x, const auto& y) { return x[3] - x[2] > y[3] - y[2]; });
  auto out = torch::empty({static_cast<int64_t>(items.size()), 4}, torch::kInt64);
  auto* o = out.data_ptr<int64_t>();
  for (size_t i = 0; i < items.size(); ++i)
    for (int c = 0; c < 4; ++c) o[4 * i + c] = items[i][c];
  return out;
}

// One worker: items pulled from ``counter`` until none is left; partial outputs (n, R, d) and LSE (n, R).
void work(torch::Tensor q, torch::Tensor k, torch::Tensor v, c10::optional<torch::Tensor> table, torch::Tensor lens,
          torch::Tensor items, torch::Tensor counter, torch::Tensor part_o, torch::Tensor part_lse, int64_t tq,
          int64_t g, double scale_log2, bool causal, bool bottom_right, int64_t wl, int64_t wr) {
  const Problem P = problem(q, k, v, table, lens, tq, g, scale_log2, causal, bottom_right, wl, wr);
  const int64_t n = items.size(0), rows = g * tq;
  const int64_t* it = items.data_ptr<int64_t>();
  int64_t* next = counter.data_ptr<int64_t>();
  float* po = part_o.data_ptr<float>();
  float* pl = part_lse.data_ptr<float>();
  Scratch w;
  for (;;) {
    const int64_t i = __atomic_fetch_add(next, 1, __ATOMIC_RELAXED);
    if (i >= n) break;
    run_item(P, it[4 * i], it[4 * i + 1], it[4 * i + 2], it[4 * i + 3], po + i * rows * P.d, pl + i * rows, w);
  }
}

// out (B, H, Tq, d): per (b, h), the items' partial outputs weighted by 2^(lse - max lse) / sum.
void merge(torch::Tensor items, torch::Tensor part_o, torch::Tensor part_lse, torch::Tensor out, int64_t g) {
  const int64_t n = items.size(0), hq = out.size(1), tq = out.size(2), d = out.size(3), hkv = hq / g;
  const int64_t rows = g * tq;
  const int64_t* it = items.data_ptr<int64_t>();
  const float* po = part_o.data_ptr<float>();
  const float* pl = part_lse.data_ptr<float>();
  float* o = out.data_ptr<float>();
  out.zero_();
  std::vector<std::vector<int64_t>> of(out.size(0) * hkv);
  for (int64_t i = 0; i < n; ++i) of[it[4 * i] * hkv + it[4 * i + 1]].push_back(i);
  std::vector<float> weight;
  for (int64_t bh = 0; bh < static_cast<int64_t>(of.size()); ++bh) {
    const auto& parts = of[bh];
    if (parts.empty()) continue;
    const int64_t b = bh / hkv, h = bh % hkv;
    for (int64_t r = 0; r < rows; ++r) {
      float top = NEG_INF;
      for (int64_t i : parts) top = std::max(top, pl[i * rows + r]);
      if (top == NEG_INF) continue;  // no key for this row in any piece: zeros
      weight.assign(parts.size(), 0.0f);
      float total = 0.0f;
      for (size_t s = 0; s < parts.size(); ++s) total += weight[s] = exp2_nonpositive(pl[parts[s] * rows + r] - top);
      float* dst = o + ((b * hq + h * g + r / tq) * tq + r % tq) * d;
      for (size_t s = 0; s < parts.size(); ++s) {
        const float wgt = weight[s] / total;
        const float* src = po + (parts[s] * rows + r) * d;
        for (int64_t c = 0; c < d; ++c) dst[c] += wgt * src[c];
      }
    }
  }
}

bool tune(int64_t prefetch, int64_t block, bool avx512, int64_t ahead_bytes, int64_t warm_blocks) {
  g_warm_blocks = std::max<int64_t>(warm_blocks, 0);
  g_ahead_bytes = std::max<int64_t>(ahead_bytes, 0);
  g_avx512 = avx512 && __builtin_cpu_supports("avx512f");
  g_prefetch = static_cast<int>(prefetch);
  g_block = static_cast<int>(std::min<int64_t>(std::max<int64_t>(block, 1), BLOCK));
  return g_avx512;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("tune", &tune, "prefetch hint (0 none, 1 T0, 2 T1, 3 T2), keys per block (<= 64), AVX-512 if the CPU has it, prefetch distance in bytes, blocks ahead to warm a paged cache's pages; returns whether AVX-512 is used");
  module.def("plan", &plan, "work items (b, h, k0, k1) of a decode call");
  module.def("work", &work, "one worker: items from the shared counter", pybind11::call_guard<pybind11::gil_scoped_release>());
  module.def("merge", &merge, "combine the items of each (b, h) by log-sum-exp",
             pybind11::call_guard<pybind11::gil_scoped_release>());
}
