// attnbench's FlashAttention-2 forward on AVX2 + FMA with its own tile GEMMs: tiled_fused's avx2 tier,
// for float32 input and for bf16 input converted to float32 as it is loaded (bf16 -> float32 is a
// 16-bit shift), accumulated in float32 either way.
//
// The structure is _flash_f32.cpp's (the AVX-512 float32 kernel) on 8-lane registers: K^T and V of a
// key block are packed once into panels of 16 columns and serve all the item's rows; the GEMM kernel
// keeps a 6 x 16 block of C in 12 registers (the shape BLIS uses on AVX2), A broadcast from memory;
// the softmax of each row is two passes over the float32 scores (the max of c * s over the allowed
// keys, then 2^(c * s - m) by one FMA and the exponential of _flash_exp2.h).
// This file is part of the extension compiled with -mavx2 -mfma where torch reports AVX2 (never
// -march=native: see _cpp_build.py); elsewhere it compiles to has_avx2_fma() == false and the
// caller takes the generic MKL path.
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "_flash_avx2.h"
#include "_flash_band.h"
#include "_flash_exp2.h"

#if defined(__AVX2__) && defined(__FMA__)
using namespace attnbench_avx2;  // NOLINT: the kernel's other half
using attnbench_band::Band;
using attnbench_band::clip;

namespace {

// One row, as softmax_row in _flash_f32.cpp: the max of c * s over the allowed keys [lo, lim) (and the
// mask), then P = 2^(c * s - m) with every other lane of [0, need) zero, and the running sum. Returns
// alpha for the accumulator row, or -1 while the row has had no allowed key.
float softmax_row(const float* s, float* prow, int64_t lo, int64_t lim, int64_t need, const uint8_t* mrow,
                  int64_t mstride, float c, float& m, float& l) {
  constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
  const int64_t j0 = lo / 8 * 8, j1 = round_up(lim, 8);
  std::fill(prow, prow + j0, 0.0f);
  if (j1 < need) std::fill(prow + j1, prow + need, 0.0f);
  const __m256 cv = _mm256_set1_ps(c), ninf = _mm256_set1_ps(NEG_INF);
  __m256 mx = ninf;
  for (int64_t j = j0; j < lim; j += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + j), cv);
    mx = _mm256_max_ps(mx, _mm256_blendv_ps(ninf, x, allowed(j, lo, lim, mrow, mstride)));
  }
  const float row_max = hmax(mx);
  const float m_new = row_max > m ? row_max : m;
  if (m_new == NEG_INF) {
    std::fill(prow + j0, prow + j1, 0.0f);
    return -1.0f;
  }
  const __m256 neg_m = _mm256_set1_ps(-m_new);
  __m256 sum = _mm256_setzero_ps();
  for (int64_t j = j0; j < lim; j += 8) {
    const __m256 x = _mm256_fmadd_ps(_mm256_loadu_ps(s + j), cv, neg_m);
    const __m256 p = _mm256_and_ps(allowed(j, lo, lim, mrow, mstride), exp2_nonpositive(x));
    sum = _mm256_add_ps(sum, p);
    _mm256_storeu_ps(prow + j, p);
  }
  const float alpha = m == NEG_INF ? 0.0f : std::exp2(m - m_new);
  l = l * alpha + hsum(sum);
  m = m_new;
  return alpha;
}

void scale_row(float* a, int64_t n, float f) {
  const __m256 fv = _mm256_set1_ps(f);
  for (int64_t j = 0; j < n; j += 8) _mm256_storeu_ps(a + j, _mm256_mul_ps(_mm256_loadu_ps(a + j), fv));
}

inline void store(float* dst, float x) { *dst = x; }
inline void store(uint16_t* dst, float x) { *dst = c10::BFloat16(x).x; }  // round to nearest even

// One work item: query rows [q0, q1) of head h of batch b; T = float or uint16_t (bf16 bits).
template <typename T>
void forward_rows(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const c10::optional<at::Tensor>& mask, at::Tensor& out, at::Tensor& lse, int64_t b, int64_t h,
                  int64_t q0, int64_t q1, const Band& band, float c, int64_t block_k, int64_t diagonal_chunk) {
  constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
  const int64_t heads = q.size(1), kv_heads = k.size(1), d = q.size(3);
  const int64_t hk = h / (heads / kv_heads), rows = q1 - q0;
  const int64_t k_begin = band.lo(q0), k_end = band.hi(q1 - 1);
  const int64_t dw = round_up(d, NR);
  const int64_t bk = std::min(block_k, std::max<int64_t>(k_end - k_begin, 1));
  const int64_t sw = round_up(bk, NR);
  const int64_t chunk = std::min(rows, diagonal_chunk);
  thread_local std::vector<float> kbuf, vbuf, sbuf, pbuf, acc, qbuf;
  kbuf.resize(sw * d);
  vbuf.resize(dw * bk);
  sbuf.resize(chunk * sw);
  pbuf.resize(chunk * sw);
  acc.assign(rows * dw, 0.0f);
  std::vector<float> m(rows, NEG_INF), l(rows, 0.0f);
  const T* qsrc = base<T>(q, b, h) + q0 * q.stride(2);
  const float* qp;
  int64_t lq;
  if constexpr (std::is_same_v<T, float>) {
    qp = qsrc, lq = q.stride(2);
  } else {  // the item's Q rows converted once
    qbuf.resize(rows * d);
    const int64_t ld = q.stride(2);
    float* qb = qbuf.data();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t u = 0; u < d; ++u) qb[r * d + u] = to_float(qsrc[r * ld + u]);
    qp = qbuf.data(), lq = d;
  }
  const T* kp = base<T>(k, b, hk);
  const T* vp = base<T>(v, b, hk);
  const uint8_t* mbase = nullptr;
  int64_t ms_q = 0, ms_k = 0;
  if (mask.has_value()) {
    mbase = mask->data_ptr<uint8_t>() + b * mask->stride(0) + h * mask->stride(1);
    ms_q = mask->stride(2), ms_k = mask->stride(3);
  }
  int64_t keys = 0;  // keys in the packed block (the V panels' row count)
  // Rows [r0, r1) against keys [kb + c0, kb + c1) of the packed block at kb; c0 is a multiple of NR.
  auto tile = [&](int64_t r0, int64_t r1, int64_t kb, int64_t c0, int64_t c1) {
    const int64_t n = r1 - r0, need = c1 - c0;
    gemm(n, (need + NR - 1) / NR, d, d, qp + r0 * lq, lq, kbuf.data() + c0 / NR * d * NR, sbuf.data(), sw, false);
    bool any = false;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = q0 + r;
      int64_t lo = 0, lim = 0;
      clip(band, i, kb + c0, need, lo, lim);
      const uint8_t* mrow = mbase ? mbase + i * ms_q + (kb + c0) * ms_k : nullptr;
      const float alpha = softmax_row(&sbuf[(r - r0) * sw], &pbuf[(r - r0) * sw], lo, lim, need, mrow, ms_k, c,
                                      m[r], l[r]);
      if (alpha >= 0.0f) any = true;
      if (alpha >= 0.0f && alpha != 1.0f) scale_row(&acc[r * dw], dw, alpha);
    }
    if (any) gemm(n, dw / NR, need, keys, pbuf.data(), sw, vbuf.data() + c0 * NR, &acc[r0 * dw], dw, true);
  };
  for (int64_t kb = k_begin; kb < k_end; kb += bk) {
    keys = std::min(kb + bk, k_end) - kb;
    pack_kt(kp + kb * k.stride(2), k.stride(2), keys, d, kbuf.data());
    pack_v(vp + kb * v.stride(2), v.stride(2), keys, d, vbuf.data());
    // Chunks of diagonal_chunk rows, each against only the keys its rows may see (see _flash_bf16.cpp).
    for (int64_t r0 = 0; r0 < rows; r0 += diagonal_chunk) {
      const int64_t r1 = std::min(r0 + diagonal_chunk, rows);
      const int64_t a = std::max(kb, band.lo(q0 + r0)), e = std::min(kb + keys, band.hi(q0 + r1 - 1));
      if (e > a) tile(r0, r1, kb, (a - kb) / NR * NR, e - kb);
    }
  }
  T* op = reinterpret_cast<T*>(out.data_ptr()) + (b * heads + h) * out.size(2) * d;
  float* lse_p = lse.data_ptr<float>() + (b * heads + h) * out.size(2);
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    T* orow = op + (q0 + r) * d;
    for (int64_t j = 0; j < d; ++j) store(orow + j, acc[r * dw + j] * inv);
    lse_p[q0 + r] = l[r] > 0.0f ? (m[r] + std::log2(l[r])) * static_cast<float>(M_LN2) : NEG_INF;
  }
}

}  // namespace

bool has_avx2_fma() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

// q, k, v: float32 or bf16 (one dtype) with contiguous rows; out: contiguous (B, H, Tq, d) of that dtype;
// lse: float32 (B, H, Tq), natural log.
void forward_item_avx2(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const c10::optional<at::Tensor>& mask, at::Tensor out, at::Tensor lse, int64_t b, int64_t h,
                       int64_t q0, int64_t q1, const std::vector<int64_t>& band_spec, double q_scale, int64_t block_k,
                       int64_t diagonal_chunk) {
  const Band band(band_spec);
  const auto dt = q.scalar_type();
  TORCH_CHECK((dt == at::kFloat || dt == at::kBFloat16) && k.scalar_type() == dt && v.scalar_type() == dt &&
                  out.scalar_type() == dt && lse.scalar_type() == at::kFloat,
              "forward_item_avx2: q, k, v, out float32 or bf16 (one dtype), lse float32");
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1 && out.is_contiguous() && lse.is_contiguous(),
              "forward_item_avx2: rows must be contiguous");
  TORCH_CHECK(!mask.has_value() || (mask->scalar_type() == at::kByte && mask->dim() == 4),
              "mask must be a uint8 (B, H, Tq, Tk) view");
  TORCH_CHECK(diagonal_chunk > 0, "diagonal_chunk must be positive");
  const float c = static_cast<float>(q_scale);
  if (dt == at::kFloat) {
    forward_rows<float>(q, k, v, mask, out, lse, b, h, q0, q1, band, c, block_k, diagonal_chunk);
  } else {
    forward_rows<uint16_t>(q, k, v, mask, out, lse, b, h, q0, q1, band, c, block_k, diagonal_chunk);
  }
}

#else  // no AVX2 + FMA in this build: the caller takes the generic path

bool has_avx2_fma() { return false; }

void forward_item_avx2(const at::Tensor&, const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
                       at::Tensor, at::Tensor, int64_t, int64_t, int64_t, int64_t, const std::vector<int64_t>&,
                       double, int64_t, int64_t) {
  TORCH_CHECK(false, "forward_item_avx2: this build has no AVX2 + FMA");
}

#endif
