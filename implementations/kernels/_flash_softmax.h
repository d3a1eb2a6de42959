// The masked online-softmax update of one query row, shared by every tiled_fused forward kernel: the
// running max and sum (rescale, also used by the generic kernel of _flash_fused.cpp), and the two
// passes over a row of a score tile (softmax_row) on any vector ISA, given as a lane type V:
//   V::W lanes; V::Vec; V::P, the element P is stored as (float, or uint16_t for bf16);
//   allowed(j, lo, lim, mrow, ms): the lanes j .. j + W - 1 in [lo, lim) that the mask row allows;
//   load, set1, mul, fma, add; max_where(mx, ok, x); exp2_where(ok, x) (2^x, 0 off ok);
//   reduce_max, reduce_add; store_p(dst, p) (W elements); padded(n) (the P columns the P V GEMM reads).
// The kernels' lane types: _flash_avx2.h (8 lanes), _flash_avx512.h (16 lanes, float32 or bf16 P).
// In an anonymous namespace: each translation unit compiles its copy for its own instruction set.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace attnbench_softmax {
namespace {

// The row's running max m (base 2) and sum l after a tile whose allowed keys have max m_new (>= m) and
// whose P = 2^(x - m_new) sum to `sum`: returns alpha, the factor for the row's accumulator (0 while m
// was -inf: the accumulator is still zero).
template <typename T>
inline T rescale(T& m, T& l, T m_new, T sum) {
  const T alpha = m == -std::numeric_limits<T>::infinity() ? T(0) : std::exp2(m - m_new);
  l = l * alpha + sum;
  m = m_new;
  return alpha;
}

// One row of a tile: x = c * s (base-2 scores), the new max over the allowed keys (lo <= j < lim and the
// mask), P = 2^(x - m) with every other column of [0, padded(need)) zero, and the running sum. Two
// passes over the float32 scores, neither writing them back; whole vectors from the one holding lo (s
// and prow hold round_up(lim, W) columns at least). Returns alpha for the accumulator row, or -1 while
// the row has had no allowed key (P all zeros, the accumulator stays zero).
template <class V>
float softmax_row(const float* s, typename V::P* prow, int64_t lo, int64_t lim, int64_t need, const uint8_t* mrow,
                  int64_t ms, float c, float& m, float& l) {
  using P = typename V::P;
  constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
  constexpr int64_t W = V::W;
  const int64_t j0 = lo / W * W, j1 = (lim + W - 1) / W * W, end = V::padded(need);
  std::fill(prow, prow + j0, P(0));
  if (j1 < end) std::fill(prow + j1, prow + end, P(0));
  const auto cv = V::set1(c);
  auto mx = V::set1(NEG_INF);
  for (int64_t j = j0; j < lim; j += W) mx = V::max_where(mx, V::allowed(j, lo, lim, mrow, ms), V::mul(V::load(s + j), cv));
  const float row_max = V::reduce_max(mx);
  const float m_new = row_max > m ? row_max : m;
  if (m_new == NEG_INF) {
    std::fill(prow + j0, prow + j1, P(0));
    return -1.0f;
  }
  const auto neg_m = V::set1(-m_new);
  auto sum = V::set1(0.0f);
  for (int64_t j = j0; j < lim; j += W) {
    const auto p = V::exp2_where(V::allowed(j, lo, lim, mrow, ms), V::fma(V::load(s + j), cv, neg_m));
    sum = V::add(sum, p);
    V::store_p(prow + j, p);
  }
  return rescale(m, l, m_new, V::reduce_add(sum));
}

}  // namespace
}  // namespace attnbench_softmax
