// Logit soft-capping (Gemma 2, FlashAttention's softcap): a score x becomes cap * tanh(x / cap), on the scaled
// logits, before any mask. The forward kernels apply it to each score tile in place, in the units the tile is in:
// s = A * tanh(s / A), with A = cap over whatever factor the tile's scores still lack (softcap_row).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace attnbench_softcap {

// tanh for float32 without a libm call, so the loop over a tile vectorises: Eigen's odd rational minimax
// (x P(x^2) / Q(x^2), degrees 13 and 6) on x clamped to +-7.905, where float32's tanh is 1 to within rounding.
// Measured against float64 tanh on 2.2 million points in [-12, 12] and 1e-8 ... 10: relative error at most
// 3.4e-7 (about 3 ulps), with no cancellation near 0.
inline float tanh_rational(float x) {
  constexpr float bound = 7.90531110763549805f;
  const float c = std::min(std::max(x, -bound), bound);
  const float x2 = c * c;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return c * p / q;
}

// s[j] = a * tanh(s[j] / a) for j in [0, n): a > 0 is the cap in the tile's units.
inline void softcap_row(float* s, int64_t n, float a) {
  const float inv = 1.0f / a;
  for (int64_t j = 0; j < n; ++j) s[j] = a * tanh_rational(s[j] * inv);
}

inline void softcap_row(double* s, int64_t n, double a) {  // float64 tiles: libm's tanh, to float64's precision
  for (int64_t j = 0; j < n; ++j) s[j] = a * std::tanh(s[j] / a);
}

}  // namespace attnbench_softcap
