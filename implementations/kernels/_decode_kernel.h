// tiled_decode's inner loops, written once over the vector width V and compiled for the level of the build
// that includes them (_decode.cpp; implementations/_cpp_build.py: ISAS, never -march=native).
//
// V is a lane type: Vec8 (256-bit registers, AVX2 + FMA + F16C) or Vec16 (512-bit, AVX-512F; only where the
// build is compiled at that level, which the Python side loads only on a CPU that has it). It gives the
// vector type, W lanes, the load/fma/add/convert operations, its register-tile shapes (SCORE_KEYS,
// SCORES_BY_ROW, PV_ROWS, PV_CHUNKS) and its horizontal sums. The entry is run<V>(...), one work item.
//
// K and V rows are read in chunks of 2W elements (W floats per register), converted on load to two fp32
// registers, and every product is accumulated in fp32:
//   float32  two loads;
//   float16  two F16C conversions (vcvtph2ps);
//   bfloat16 one load of 2W values and no shuffle: a bf16 is the top half of an fp32, so the even elements
//            are the 32-bit lanes shifted left by 16 and the odd ones the lanes with the low half cleared.
//   FP8      2W bytes widened to 16-bit lanes and rebuilt as float16 bits (fp8_to_half), then two F16C
//            conversions: e5m2 is a float16's top byte; e4m3fn's bits are placed as a float16 256 times
//            smaller (exact, subnormals included), and the factor 256 joins the scales. Each row's own scale
//            multiplies its score (K) and its weight (V), never the elements: one multiply a key, not d.
// The bfloat16 chunk thus arrives as (even elements, odd elements). The query rows and the output
// accumulators are kept in that same order (the "kernel layout", `layout_index`), so dot products and
// P V updates need no permutation at all; only loading q and writing the output translate.
//
// It uses what _decode.cpp defines before including it (Problem, Scratch, Spread's prefetch_row, the
// softmax): the other half of one translation unit, not a header of its own.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

// 16 FP8 values (bytes) as the float16 bits of the same values (e5m2) or of the values / 256 (e4m3fn: its
// exponent bias is 7, float16's 15; NaN, S.1111.111, stays NaN).
template <bool E4M3>
inline __m256i fp8_to_half(__m128i bytes) {
  const __m256i x = _mm256_cvtepu8_epi16(bytes);
  if constexpr (!E4M3) {
    return _mm256_slli_epi16(x, 8);
  } else {
    const __m256i mag = _mm256_and_si256(x, _mm256_set1_epi16(0x7F));
    const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(x, _mm256_set1_epi16(0x80)), 8);
    const __m256i nan = _mm256_and_si256(_mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7F)), _mm256_set1_epi16(0x7E00));
    return _mm256_or_si256(_mm256_or_si256(sign, _mm256_slli_epi16(mag, 7)), nan);
  }
}

struct Vec8 {
  using vec = __m256;
  using ivec = __m256i;
  static constexpr int W = 8;
  static vec zero() { return _mm256_setzero_ps(); }
  static vec load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, vec x) { _mm256_storeu_ps(p, x); }
  static vec fma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
  static vec add(vec a, vec b) { return _mm256_add_ps(a, b); }
  static vec set1(float x) { return _mm256_set1_ps(x); }
  static ivec iload(const char* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static vec bf16_even(ivec x) { return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)); }
  static vec bf16_odd(ivec x) { return _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(-65536))); }
  static vec f16_load(const char* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  template <bool E4M3>
  static void fp8_load(const char* p, vec& lo, vec& hi) {  // 16 bytes
    const __m256i h = fp8_to_half<E4M3>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  }
  static float sum(vec x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static constexpr int SCORE_KEYS = 2;  // scores: up to 4 rows x 2 keys
  static constexpr bool SCORES_BY_ROW = true;  // each key's row read whole before the next (see scores_by_row)
  // P V tile, 8 accumulators: float32 1 row x 4 chunks (64 columns, 256 bytes of each V row per pass); 16-bit
  // caches 2 rows x 2 chunks (32 columns, 64 bytes), which converts each loaded chunk for two rows, not one.
  template <int KIND>
  static constexpr int PV_ROWS = KIND == KV_F32 ? 1 : 2;
  template <int KIND>
  static constexpr int PV_CHUNKS = KIND == KV_F32 ? 4 : 2;

  static void reduce_all(const vec* a, float* out) {  // 8 registers -> 8 sums by hadd (a transpose tree)
    const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 lo = _mm256_hadd_ps(h01, h23), hi = _mm256_hadd_ps(h45, h67);
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31)));
  }
};

#ifdef __AVX512F__
struct Vec16 {
  using vec = __m512;
  using ivec = __m512i;
  static constexpr int W = 16;
  static vec zero() { return _mm512_setzero_ps(); }
  static vec load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, vec x) { _mm512_storeu_ps(p, x); }
  static vec fma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
  static vec add(vec a, vec b) { return _mm512_add_ps(a, b); }
  static vec set1(float x) { return _mm512_set1_ps(x); }
  static ivec iload(const char* p) { return _mm512_loadu_si512(reinterpret_cast<const void*>(p)); }
  static vec bf16_even(ivec x) { return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)); }
  static vec bf16_odd(ivec x) { return _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(-65536))); }
  static vec f16_load(const char* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  template <bool E4M3>
  static void fp8_load(const char* p, vec& lo, vec& hi) {  // 32 bytes
    lo = _mm512_cvtph_ps(fp8_to_half<E4M3>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    hi = _mm512_cvtph_ps(fp8_to_half<E4M3>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
  }
  static float sum(vec x) { return _mm512_reduce_add_ps(x); }
  static constexpr int SCORE_KEYS = 4;  // scores tile: up to 4 rows x 4 keys of accumulators (16 of the 32 registers)
  static constexpr bool SCORES_BY_ROW = false;  // the tile's chunk of each key in turn (see scores_by_row)
  // P V tile: 2 rows x 4 chunks (128 columns): each V row streams once per row pair.
  template <int KIND>
  static constexpr int PV_ROWS = 2;
  template <int KIND>
  static constexpr int PV_CHUNKS = 4;

  // Lane i of the result is the sum of the lanes of input i: 16 horizontal sums by a transpose tree.
  static __m512 pair_sum(__m512 x, __m512 y) { return _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y)); }
  static __m512 quad_sum(__m512 a, __m512 b) {
    const __m512d x = _mm512_castps_pd(a), y = _mm512_castps_pd(b);
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  static void reduce_all(const vec* a, float* out) {  // 16 registers -> 16 sums
    const __m512 u0 = quad_sum(pair_sum(a[0], a[1]), pair_sum(a[2], a[3]));
    const __m512 u1 = quad_sum(pair_sum(a[4], a[5]), pair_sum(a[6], a[7]));
    const __m512 u2 = quad_sum(pair_sum(a[8], a[9]), pair_sum(a[10], a[11]));
    const __m512 u3 = quad_sum(pair_sum(a[12], a[13]), pair_sum(a[14], a[15]));
    const __m512 w01 = _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, 0x44), _mm512_shuffle_f32x4(u0, u1, 0xEE));
    const __m512 w23 = _mm512_add_ps(_mm512_shuffle_f32x4(u2, u3, 0x44), _mm512_shuffle_f32x4(u2, u3, 0xEE));
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88), _mm512_shuffle_f32x4(w01, w23, 0xDD)));
  }
};
#endif


template <class V>
constexpr int CH = 2 * V::W;  // elements per chunk of a row: two registers

// Elements [c, c + CH) of a row (`row` points at element c) as two fp32 registers in the kernel layout.
template <class V, int KIND>
inline void load_chunk(const char* row, typename V::vec& lo, typename V::vec& hi) {
  if constexpr (KIND == KV_F32) {
    lo = V::load(reinterpret_cast<const float*>(row));
    hi = V::load(reinterpret_cast<const float*>(row) + V::W);
  } else if constexpr (KIND == KV_BF16) {
    const typename V::ivec x = V::iload(row);
    lo = V::bf16_even(x);
    hi = V::bf16_odd(x);
  } else if constexpr (is_fp8(KIND)) {
    V::template fp8_load<KIND == KV_E4M3>(row, lo, hi);
  } else {
    lo = V::f16_load(row);
    hi = V::f16_load(row + 2 * V::W);
  }
}

// Where column c of a row sits in the kernel layout (chunks of CH; bfloat16: even elements, then odd).
template <class V, int KIND>
inline int64_t layout_index(int64_t c) {
  if constexpr (KIND != KV_BF16) return c;
  const int64_t base = c - c % CH<V>, i = c % CH<V>;
  return base + (i % 2 ? V::W + i / 2 : i / 2);
}

// The last, partial chunk of a row (columns c.. of d), zero-padded into `buf` (CH elements).
template <class V, int KIND>
inline const char* padded(const char* row, int64_t c, int64_t d, char* buf) {
  const int64_t size = kv_size(KIND);
  std::memset(buf, 0, CH<V> * size);
  std::memcpy(buf, row + c * size, (d - c) * size);
  return buf;
}

// One chunk of the scores tile: acc[r][j] += Q[r] . K_j over the chunk's columns (rows point at the chunk).
template <class V, int KIND, int RR, int KK>
__attribute__((always_inline)) inline void scores_step(const float* q, int64_t dp, const char* const* rows, typename V::vec (&acc)[RR][KK]) {
  typename V::vec klo[KK], khi[KK];
  #pragma GCC unroll 16
  for (int j = 0; j < KK; ++j) load_chunk<V, KIND>(rows[j], klo[j], khi[j]);
  #pragma GCC unroll 16
  for (int r = 0; r < RR; ++r) {
    const typename V::vec qlo = V::load(q + r * dp), qhi = V::load(q + r * dp + V::W);
    #pragma GCC unroll 16
    for (int j = 0; j < KK; ++j) acc[r][j] = V::fma(qhi, khi[j], V::fma(qlo, klo[j], acc[r][j]));
  }
}

// The last d % CH columns of a scores tile, from zero-padded copies (never a read past a row). Out of line:
// its buffers would otherwise make every call of the hot tile realign its stack.
template <class V, int KIND, int RR, int KK>
__attribute__((noinline)) void scores_tail(const float* q, int64_t dp, const char* const* kp, int64_t full, int64_t d,
                                           typename V::vec (&acc)[RR][KK]) {
  alignas(64) char buf[KK][CH<V> * 4];
  const char* at[KK];
  for (int j = 0; j < KK; ++j) at[j] = padded<V, KIND>(kp[j], full, d, buf[j]);
  scores_step<V, KIND, RR, KK>(q + full, dp, at, acc);
}

// s[r * ld + j] = the sum of acc[r][j]'s lanes; a full tile (RR x KK = W) does every horizontal sum at once.
template <class V, int RR, int KK>
__attribute__((always_inline)) inline void store_sums(const typename V::vec (&acc)[RR][KK], float* s, int64_t ld) {
  if constexpr (RR * KK == V::W) {
    alignas(64) float sums[V::W];
    V::reduce_all(&acc[0][0], sums);
    for (int r = 0; r < RR; ++r)
      for (int j = 0; j < KK; ++j) s[r * ld + j] = sums[r * KK + j];
  } else {
    for (int r = 0; r < RR; ++r)
      for (int j = 0; j < KK; ++j) s[r * ld + j] = V::sum(acc[r][j]);
  }
}

// S[r][j] = Q[r] . K_j for RR rows x KK keys; each K chunk is loaded (and converted) once for all rows.
template <class V, int KIND, int RR, int KK>
__attribute__((always_inline)) inline void scores_tile(const float* q, int64_t dp, const char* const* kp, int64_t d,
                                                       float* s, int64_t ld) {
  const int64_t size = kv_size(KIND);
  typename V::vec acc[RR][KK];
  #pragma GCC unroll 16
  for (int r = 0; r < RR; ++r)
    #pragma GCC unroll 16
    for (int j = 0; j < KK; ++j) acc[r][j] = V::zero();
  const int64_t full = d - d % CH<V>;
  const char* at[KK];
  for (int64_t c = 0; c < full; c += CH<V>) {
    #pragma GCC unroll 16
    for (int j = 0; j < KK; ++j) at[j] = kp[j] + c * size;
    scores_step<V, KIND, RR, KK>(q + c, dp, at, acc);
  }
  if (full < d) scores_tail<V, KIND, RR, KK>(q, dp, kp, full, d, acc);
  store_sums<V>(acc, s, ld);
}

// Prefetches spread evenly over the passes of a phase: pass `pass` of `passes` prefetches the rows of keys
// j = pass, pass + passes, ... (``ahead[j]``: the row a fixed distance past key j, null past the end), so the
// memory has a steady stream of requests however many passes over the block's rows the phase makes.
struct Spread {
  const char* const* k;  // K rows ahead (or null)
  const char* const* v;  // V rows ahead (or null)
  int64_t bytes, pass, passes;
};

// S[r][j .. j + KK) for RR rows, one key after another, each key's row read whole and in order (two chunks
// per step). The hardware prefetchers follow a row-order stream; the tile above interleaves KK rows a chunk at
// a time, which on AVX2 (64-byte chunks) they follow poorly: from memory this reads 7-10% faster there (in
// cache, the same). A key's products go to two sets of accumulators (even and odd chunks), so each chain of
// dependent FMAs is half as long.
template <class V, int KIND, int RR, int KK>
__attribute__((always_inline)) inline void scores_by_row(const float* q, int64_t dp, const char* const* kp, int64_t d,
                                                         float* s, int64_t ld) {
  const int64_t size = kv_size(KIND);
  const int64_t full = d - d % CH<V>;
  typename V::vec sums[RR][KK];
  #pragma GCC unroll 16
  for (int j = 0; j < KK; ++j) {
    typename V::vec acc[RR][2], rest[RR][1];
    #pragma GCC unroll 16
    for (int r = 0; r < RR; ++r) acc[r][0] = acc[r][1] = rest[r][0] = V::zero();
    int64_t c = 0;
    for (; c + 2 * CH<V> <= full; c += 2 * CH<V>) {
      typename V::vec k0, k1, k2, k3;
      load_chunk<V, KIND>(kp[j] + c * size, k0, k1);
      load_chunk<V, KIND>(kp[j] + (c + CH<V>) * size, k2, k3);
      #pragma GCC unroll 16
      for (int r = 0; r < RR; ++r) {
        const float* qr = q + r * dp + c;
        acc[r][0] = V::fma(V::load(qr), k0, acc[r][0]);
        acc[r][1] = V::fma(V::load(qr + V::W), k1, acc[r][1]);
        acc[r][0] = V::fma(V::load(qr + 2 * V::W), k2, acc[r][0]);
        acc[r][1] = V::fma(V::load(qr + 3 * V::W), k3, acc[r][1]);
      }
    }
    if (c < full) {  // an odd number of whole chunks
      const char* at[1] = {kp[j] + c * size};
      scores_step<V, KIND, RR, 1>(q + c, dp, at, rest);
    }
    if (full < d) scores_tail<V, KIND, RR, 1>(q, dp, kp + j, full, d, rest);
    #pragma GCC unroll 16
    for (int r = 0; r < RR; ++r) sums[r][j] = V::add(V::add(acc[r][0], acc[r][1]), rest[r][0]);
  }
  store_sums<V>(sums, s, ld);
}

template <class V, int KIND, int RR>
inline void scores_rows(const float* q, int64_t dp, const char* const* kp, int64_t nk, int64_t d, float* s,
                        const Spread& pf) {
  int64_t j = 0, next = pf.k || pf.v ? pf.pass : nk;
  for (; j + V::SCORE_KEYS <= nk; j += V::SCORE_KEYS) {
    for (; next < j + V::SCORE_KEYS; next += pf.passes) {
      if (pf.k) prefetch_row(pf.k[next], pf.bytes);
      if (pf.v) prefetch_row(pf.v[next], pf.bytes);
    }
    if constexpr (V::SCORES_BY_ROW) scores_by_row<V, KIND, RR, V::SCORE_KEYS>(q, dp, kp + j, d, s + j, BLOCK);
    else scores_tile<V, KIND, RR, V::SCORE_KEYS>(q, dp, kp + j, d, s + j, BLOCK);
  }
  for (; next < nk; next += pf.passes) {
    if (pf.k) prefetch_row(pf.k[next], pf.bytes);
    if (pf.v) prefetch_row(pf.v[next], pf.bytes);
  }
  for (; j < nk; ++j) scores_tile<V, KIND, RR, 1>(q, dp, kp + j, d, s + j, BLOCK);
}

template <class V, int KIND>
void scores(const float* q, int64_t rows, int64_t dp, const char* const* kp, int64_t nk, int64_t d, float* s,
            Spread pf) {
  pf.passes = (rows + 3) / 4;
  int64_t r = 0;
  for (pf.pass = 0; r + 4 <= rows; r += 4, ++pf.pass) scores_rows<V, KIND, 4>(q + r * dp, dp, kp, nk, d, s + r * BLOCK, pf);
  switch (rows - r) {
    case 3: scores_rows<V, KIND, 3>(q + r * dp, dp, kp, nk, d, s + r * BLOCK, pf); break;
    case 2: scores_rows<V, KIND, 2>(q + r * dp, dp, kp, nk, d, s + r * BLOCK, pf); break;
    case 1: scores_rows<V, KIND, 1>(q + r * dp, dp, kp, nk, d, s + r * BLOCK, pf); break;
    default: break;
  }
}

// acc[r][chunks c0 .. c0 + CW) += sum_j P[r][j] V_j: RR rows x CW chunks of accumulators in registers over the
// block. TAIL: the last chunk is partial (read from a zero-padded copy).
template <class V, int KIND, int RR, int CW, bool TAIL>
__attribute__((always_inline)) inline void pv_tile(const float* p, const char* const* vp, int64_t nk, int64_t c0, int64_t d, float* acc, int64_t dp,
                    const Spread& pf) {
  const int64_t size = kv_size(KIND);
  typename V::vec a[RR][2 * CW];
  #pragma GCC unroll 16
  for (int r = 0; r < RR; ++r)
    #pragma GCC unroll 16
    for (int c = 0; c < 2 * CW; ++c) a[r][c] = V::load(acc + r * dp + c0 + V::W * c);
  alignas(64) char buf[TAIL ? CH<V> * 4 : 1];  // the partial chunk, zero-padded (TAIL only)
  int64_t next = pf.v ? pf.pass : nk;
  for (int64_t j = 0; j < nk; ++j) {
    if (j == next) {
      prefetch_row(pf.v[j], pf.bytes);
      next += pf.passes;
    }
    typename V::vec vv[2 * CW];
    #pragma GCC unroll 16
    for (int c = 0; c < CW; ++c) {
      const char* at = vp[j] + (c0 + c * CH<V>) * size;
      if (TAIL && c == CW - 1) at = padded<V, KIND>(vp[j], c0 + c * CH<V>, d, buf);
      load_chunk<V, KIND>(at, vv[2 * c], vv[2 * c + 1]);
    }
    #pragma GCC unroll 16
    for (int r = 0; r < RR; ++r) {
      const typename V::vec pr = V::set1(p[r * BLOCK + j]);
      #pragma GCC unroll 16
      for (int c = 0; c < 2 * CW; ++c) a[r][c] = V::fma(pr, vv[c], a[r][c]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < RR; ++r)
    #pragma GCC unroll 16
    for (int c = 0; c < 2 * CW; ++c) V::store(acc + r * dp + c0 + V::W * c, a[r][c]);
}

template <class V, int KIND, int RR, int CW>
inline void pv_chunks(const float* p, const char* const* vp, int64_t nk, int64_t c0, int64_t d, float* acc, int64_t dp,
                      const Spread& pf) {
  if (c0 + CW * CH<V> > d) pv_tile<V, KIND, RR, CW, true>(p, vp, nk, c0, d, acc, dp, pf);
  else pv_tile<V, KIND, RR, CW, false>(p, vp, nk, c0, d, acc, dp, pf);
}

template <class V, int KIND, int RR>
inline void pv_rows(const float* p, const char* const* vp, int64_t nk, int64_t d, int64_t dp, float* acc, Spread& pf) {
  const int64_t chunks = (d + CH<V> - 1) / CH<V>;
  constexpr int group = V::template PV_CHUNKS<KIND>;
  static_assert(group == 2 || group == 4);
  for (int64_t c = 0; c < chunks; c += group, ++pf.pass) {
    switch (std::min<int64_t>(group, chunks - c)) {
      case 4: pv_chunks<V, KIND, RR, group == 4 ? 4 : 2>(p, vp, nk, c * CH<V>, d, acc, dp, pf); break;
      case 3: pv_chunks<V, KIND, RR, group == 4 ? 3 : 2>(p, vp, nk, c * CH<V>, d, acc, dp, pf); break;
      case 2: pv_chunks<V, KIND, RR, 2>(p, vp, nk, c * CH<V>, d, acc, dp, pf); break;
      default: pv_chunks<V, KIND, RR, 1>(p, vp, nk, c * CH<V>, d, acc, dp, pf); break;
    }
  }
}

template <class V, int KIND>
void pv(const float* p, int64_t rows, const char* const* vp, int64_t nk, int64_t d, int64_t dp, float* acc, Spread pf) {
  const int64_t chunks = (d + CH<V> - 1) / CH<V>;
  constexpr int PR = V::template PV_ROWS<KIND>, PC = V::template PV_CHUNKS<KIND>;
  pf.passes = (rows + PR - 1) / PR * ((chunks + PC - 1) / PC);
  pf.pass = 0;
  int64_t r = 0;
  static_assert(PR == 1 || PR == 2);
  for (; r + PR <= rows; r += PR) pv_rows<V, KIND, PR>(p + r * BLOCK, vp, nk, d, dp, acc + r * dp, pf);
  if (r < rows) pv_rows<V, KIND, 1>(p + r * BLOCK, vp, nk, d, dp, acc + r * dp, pf);
}

// s[r * BLOCK + j] *= scale[j] for every row: an FP8 cache's row scales, one multiply a key.
inline void scale_columns(float* s, int64_t rows, int64_t nk, const float* scale) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < nk; ++j) s[r * BLOCK + j] *= scale[j];
}

// One work item (b, h, keys [k0, k1)): its normalised partial output (rows, d) and log-sum-exp (base 2).
template <class V, int KIND>
void run_item(const Problem& P, int64_t b, int64_t h, int64_t k0, int64_t k1, float* out_o, float* out_lse,
              Scratch& w) {
  const int64_t rows = P.g * P.tq, dp = P.dp, d = P.d;
  w.prepare(rows, dp);
  Bounds bounds = item_bounds(P, b, k0, k1, w);
  for (int64_t gi = 0; gi < P.g; ++gi)
    for (int64_t t = 0; t < P.tq; ++t) {
      const float* src = P.q + b * P.qs[0] + (h * P.g + gi) * P.qs[1] + t * P.qs[2];
      float* dst = w.q.data() + (gi * P.tq + t) * dp;
      for (int64_t c = 0; c < d; ++c) dst[layout_index<V, KIND>(c)] = src[c * P.qs[3]] * P.scale_log2;
    }
  k0 = bounds.k0;
  k1 = bounds.k1;
  const int64_t row_bytes = d * kv_size(KIND);
  const int64_t ahead = std::max<int64_t>(1, g_ahead_bytes / row_bytes);  // keys between a prefetch and its use
  const bool v_early = V::W == 16 && g_v_in_scores;  // the 256-bit loops prefetch V during P V (see tiled_decode.py)
  if (k0 < k1) fill_rows(P, b, h, k0, k1, w.kp.data(), w.vp.data());
  for (int64_t kb = k0; kb < k1; kb += g_block) {
    const int64_t nk = std::min<int64_t>(g_block, k1 - kb);
    const int64_t na = g_prefetch && kb + ahead < k1 ? fill_rows(P, b, h, kb + ahead, k1, w.ka.data(), w.va.data()) : 0;
    for (int64_t j = na; j < nk; ++j) w.ka[j] = w.va[j] = nullptr;
    if (P.page && g_prefetch && g_warm_blocks)
      warm_pages(P, b, h, kb + ahead + g_warm_blocks * g_block, std::min(k1, kb + ahead + (g_warm_blocks + 1) * g_block));
    const char* const* ka = g_prefetch ? w.ka.data() : nullptr;
    const char* const* va = g_prefetch ? w.va.data() : nullptr;
    scores<V, KIND>(w.q.data(), rows, dp, w.kp.data(), nk, d, w.s.data(), Spread{ka, v_early ? va : nullptr, row_bytes, 0, 1});
    if constexpr (is_fp8(KIND)) {  // each K row's scale on its scores; after the softmax, each V row's on its weights
      fill_scales(P, b, h, kb, nk, w.ksc.data(), w.vsc.data());
      scale_columns(w.s.data(), rows, nk, w.ksc.data());
      softmax_block(P, w, kb, nk, rows, bounds);
      scale_columns(w.s.data(), rows, nk, w.vsc.data());
    } else {
      softmax_block(P, w, kb, nk, rows, bounds);
    }
    pv<V, KIND>(w.s.data(), rows, w.vp.data(), nk, d, dp, w.acc.data(), Spread{nullptr, v_early ? nullptr : va, row_bytes, 0, 1});
    if (kb + g_block < k1) fill_rows(P, b, h, kb + g_block, k1, w.kp.data(), w.vp.data());
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float l = w.l[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const float factor = inv * P.v_factor;
    for (int64_t c = 0; c < d; ++c) out_o[r * d + c] = w.acc[r * dp + layout_index<V, KIND>(c)] * factor;
    out_lse[r] = l > 0.0f ? w.m[r] + std::log2(l) : NEG_INF;
  }
}

template <class V>
void run(const Problem& P, int64_t b, int64_t h, int64_t k0, int64_t k1, float* out_o, float* out_lse, Scratch& w) {
  switch (P.kind) {
    case KV_BF16: run_item<V, KV_BF16>(P, b, h, k0, k1, out_o, out_lse, w); break;
    case KV_F16: run_item<V, KV_F16>(P, b, h, k0, k1, out_o, out_lse, w); break;
    case KV_E4M3: run_item<V, KV_E4M3>(P, b, h, k0, k1, out_o, out_lse, w); break;
    case KV_E5M2: run_item<V, KV_E5M2>(P, b, h, k0, k1, out_o, out_lse, w); break;
    default: run_item<V, KV_F32>(P, b, h, k0, k1, out_o, out_lse, w); break;
  }
}

}  // namespace
