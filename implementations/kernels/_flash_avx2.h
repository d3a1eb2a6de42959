// The AVX2 + FMA tile GEMM (6 x 16 register block), lane masks and the 8-lane type of the shared softmax
// row (_flash_softmax.h), for tiled_fused's avx2 forward (_flash_avx2.cpp) and backward
// (_flash_avx2_backward.cpp). B operands are packed in panels of 16 columns (zero-padded; _flash_pack.h,
// float32 or bf16 converted as it is packed); A is read in place, row by row.
// Only for translation units compiled with -mavx2 -mfma (see _cpp_build.py).
#pragma once

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "_flash_exp2.h"
#include "_flash_pack.h"
#include "_flash_softmax.h"

namespace attnbench_avx2 {

constexpr int64_t NR = 16;  // columns of C per panel (two 8-lane vectors)
constexpr int64_t MR = 6;   // rows of C per kernel call

using attnbench_pack::hmax;
using attnbench_pack::hsum;
using attnbench_pack::round_up;

// C[0:R, 0:16] (+)= A[0:R, 0:kk] * panel (kk rows of 16 floats), R <= 6: row I of C in lo[I], hi[I]. Every
// index is a constant of the pack expansion, never a loop variable, so GCC replaces the arrays by 2R
// registers (with the two B vectors and the broadcast: at most 15 of 16); an array indexed in a loop it
// keeps in memory and reloads every step. Rows 3.. are addressed from a + 3 lda: two base registers.
template <int R, int... I>
inline void micro_rows(const float* a, int64_t lda, const float* panel, int64_t kk, float* c, int64_t ldc, bool add,
                       std::integer_sequence<int, I...>) {
  const __m256 z = _mm256_setzero_ps();
  __m256 lo[R], hi[R];
  ((lo[I] = add ? _mm256_loadu_ps(c + I * ldc) : z, hi[I] = add ? _mm256_loadu_ps(c + I * ldc + 8) : z), ...);
  const float* a3 = a + 3 * lda;
  for (int64_t p = 0; p < kk; ++p) {
    const __m256 b0 = _mm256_loadu_ps(panel + p * NR);
    const __m256 b1 = _mm256_loadu_ps(panel + p * NR + 8);
    __m256 x;
    ((x = _mm256_broadcast_ss((I < 3 ? a : a3) + (I % 3) * lda + p), lo[I] = _mm256_fmadd_ps(x, b0, lo[I]),
      hi[I] = _mm256_fmadd_ps(x, b1, hi[I])),
     ...);
  }
  ((_mm256_storeu_ps(c + I * ldc, lo[I]), _mm256_storeu_ps(c + I * ldc + 8, hi[I])), ...);
}

template <int R>
inline void micro(const float* a, int64_t lda, const float* panel, int64_t kk, float* c, int64_t ldc, bool add) {
  micro_rows<R>(a, lda, panel, kk, c, ldc, add, std::make_integer_sequence<int, R>{});
}

constexpr int64_t KC = 256;  // k per pass: a B panel of KC x 16 floats (16 KiB) stays in L1 beside A's rows

// C (m x 16 panels) (+)= A (m x kk, row stride lda) * packed B, whose panels hold kstride >= kk rows each;
// in passes of KC rows of B (P V with 512 keys: one panel alone would fill L1).
inline void gemm(int64_t m, int64_t panels, int64_t kk, int64_t kstride, const float* a, int64_t lda, const float* b,
                 float* c, int64_t ldc, bool add) {
  for (int64_t k0 = 0; k0 < kk; k0 += KC) {
    const int64_t kc = std::min(KC, kk - k0);
    const bool acc = add || k0 > 0;
    for (int64_t j = 0; j < panels; ++j) {
      const float* panel = b + j * kstride * NR + k0 * NR;
      for (int64_t i = 0; i < m; i += MR) {
        const float* ai = a + i * lda + k0;
        float* ci = c + i * ldc + j * NR;
        attnbench_pack::with_rows<MR>(m - i, [&](auto rows) {
          micro<decltype(rows)::value>(ai, lda, panel, kc, ci, ldc, acc);
        });
      }
    }
  }
}

// Lanes j .. j + 7 of a row that lie in [lo, lim) and that the mask (if any) allows: all ones or zeros.
inline __m256 allowed(int64_t j, int64_t lo, int64_t lim, const uint8_t* mrow, int64_t mstride) {
  if (mrow == nullptr && j >= lo && j + 8 <= lim) return _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(j)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256i ok = _mm256_and_si256(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(static_cast<int32_t>(lo - 1))),
                                _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(lim)), idx));
  if (mrow != nullptr) {
    alignas(32) int32_t bits[8];
    for (int64_t u = 0; u < 8; ++u) bits[u] = j + u < lim && mrow[(j + u) * mstride] ? -1 : 0;
    ok = _mm256_and_si256(ok, _mm256_load_si256(reinterpret_cast<const __m256i*>(bits)));
  }
  return _mm256_castsi256_ps(ok);
}

// The lane type of softmax_row (_flash_softmax.h): 8 lanes, P in float32, masks as all-ones lanes.
struct Lanes {
  using P = float;
  using Vec = __m256;
  static constexpr int64_t W = 8;
  static float reduce_max(__m256 x) { return hmax(x); }
  static float reduce_add(__m256 x) { return hsum(x); }
  static __m256 load(const float* s) { return _mm256_loadu_ps(s); }
  static __m256 set1(float x) { return _mm256_set1_ps(x); }
  static __m256 mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
  static __m256 fma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
  static __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
  static int64_t padded(int64_t n) { return n; }
  static __m256 allowed(int64_t j, int64_t lo, int64_t lim, const uint8_t* mrow, int64_t ms) {
    return attnbench_avx2::allowed(j, lo, lim, mrow, ms);
  }
  static __m256 max_where(__m256 mx, __m256 ok, __m256 x) {
    return _mm256_max_ps(mx, _mm256_blendv_ps(_mm256_set1_ps(-std::numeric_limits<float>::infinity()), x, ok));
  }
  static __m256 exp2_where(__m256 ok, __m256 x) { return _mm256_and_ps(ok, exp2_nonpositive(x)); }
  static void store_p(float* dst, __m256 p) { _mm256_storeu_ps(dst, p); }
};

}  // namespace attnbench_avx2

#endif  // __AVX2__ && __FMA__
