// exp2 for x <= 0, shared by tiled_fused's kernels (and tiled_decode's).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

// 2^x for x <= 0 (scores minus their row max), exact 0 below -126 (masked keys are -inf).
// A degree-5 least-squares fit of 2^f on the rounded remainder f in [-0.5, 0.5]: relative error
// 2.2e-7 in float32 arithmetic (measured on 200k points), about two float32 ulps; no libm call.
inline float exp2_nonpositive(float x) {
  const float xc = x < -126.0f ? -126.0f : x;
  const float n = (xc + 12582912.0f) - 12582912.0f;  // round to nearest (|x| < 2^22)
  const float f = xc - n;                              // in [-0.5, 0.5]
  float p = 1.3266970636323094e-3f;
  p = p * f + 9.675459936261177e-3f;
  p = p * f + 5.550742521882057e-2f;
  p = p * f + 2.4022121727466583e-1f;
  p = p * f + 6.931469440460205e-1f;
  p = p * f + 1.0000001192092896e0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < -126.0f ? 0.0f : p * scale;
}

inline double exp2_nonpositive(double x) { return std::exp2(x); }

// The same degree-5 polynomial in f on a vector of any width: fma(a, b, c) = a * b + c and set1(x) are the
// ISA's (_mm256_fmadd_ps and _mm256_set1_ps, or the 512-bit ones), passed as lambdas the compiler inlines.
template <typename Vec, typename Fma, typename Set1>
inline Vec exp2_poly5(Vec f, Fma fma, Set1 set1) {
  Vec p = set1(1.3266970636323094e-3f);
  p = fma(p, f, set1(9.675459936261177e-3f));
  p = fma(p, f, set1(5.550742521882057e-2f));
  p = fma(p, f, set1(2.4022121727466583e-1f));
  p = fma(p, f, set1(6.931469440460205e-1f));
  return fma(p, f, set1(1.0000001192092896e0f));
}

#ifdef __AVX2__
#include <immintrin.h>

// Eight lanes of exp2_nonpositive (same polynomial): GCC does not reliably vectorise the scalar
// form inside the row loop (measured: the scalar path ran, 2.4 ns per score), so it is spelled out.
inline __m256 exp2_nonpositive(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-126.0f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  const __m256 xc = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(xc, n);
  const __m256 p = exp2_poly5(f, [](__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); },
                              [](float x) { return _mm256_set1_ps(x); });
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// s[j] = 2^(s[j] - m) in place for j < n (s[j] <= m); returns their sum (eight lanes, then the tail).
inline float exp2_shifted_sum(float* s, int64_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 p = exp2_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
    _mm256_storeu_ps(s + j, p);
    acc = _mm256_add_ps(acc, p);
  }
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  float sum = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
  for (; j < n; ++j) {
    s[j] = exp2_nonpositive(s[j] - m);
    sum += s[j];
  }
  return sum;
}

#endif  // __AVX2__
