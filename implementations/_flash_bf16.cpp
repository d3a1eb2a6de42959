// attnbench's bfloat16 FlashAttention-2 forward on the CPU's bf16 dot-product units (AVX512_BF16).
//
// Both tile GEMMs run on VDPBF16PS (_mm512_dpbf16_ps: pairs of bf16 products summed into float32
// lanes) in a small register-blocked kernel; scores, the softmax, the running max/sum and the output
// accumulator are float32; P is rounded to bf16 for the second GEMM (as FlashAttention does on GPUs)
// and the output is rounded to bf16 once, at the end.
// Every function that uses AVX-512 is compiled for it with a target attribute, the rest of the file
// for the baseline ISA: the caller checks has_avx512bf16() at run time before calling forward_item_bf16.
// The GEMM kernel and packing are in _flash_bf16.h: for S = Q K^T, B = K^T is packed from K's rows
// (pack_kt); for O += P V, B = V (pack_v).
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "_flash_band.h"
#include "_flash_bf16.h"

using namespace attnbench_bf16;  // NOLINT: this file is the kernel's other half
using attnbench_band::Band;
using attnbench_band::clip;

namespace {

// 2^x on the lanes in ``keep`` (0 on the others), for P only: x = c s - m is at most a rounding above 0
// and finite (masked keys are the lanes not kept, never -inf), so no clamp is needed: below -149 scalef
// underflows to 0 by itself. P is rounded to bf16 (relative step 2^-8) right after, so a degree-3 fit
// of 2^f on [-0.5, 0.5] (relative error 7.7e-5, measured on 200k points) is as good as degree 5.
BF16_TARGET inline __m512 exp2_for_p(__mmask16 keep, __m512 x) {
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(5.508876591920853e-2f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4260465800762177e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.932762861251831e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.99928891658783e-1f));
  return _mm512_maskz_scalef_ps(keep, p, n);
}

// One row: x = c * s (base-2 scores), its new max over the allowed keys, P = bf16(2^(x - m)) with keys
// outside [lo, lim), forbidden keys and keys [lim, pw) zero, the running sum in float32. Returns alpha for
// the accumulator row, or -1 when the row has had no allowed key yet (P all zeros, the accumulator stays zero).
// Two passes over the float32 scores, neither writing them back: the max of c * s over the allowed lanes,
// then 2^(c * s - m) by one FMA and the exponential, forbidden lanes zeroed (the softmax was a fifth of the
// bf16 forward's time; scores are never stored twice now).
BF16_TARGET float softmax_row(const float* s, uint16_t* prow, int64_t lo, int64_t lim, int64_t pw, const uint8_t* mrow,
                              int64_t mstride, float c, float& m, float& l) {
  constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
  auto allowed = [&](int64_t j) {  // lanes j .. j + 15 that exist, are at or past lo and the mask allows
    __mmask16 ok = tail(lim - j);
    if (lo > j) ok &= static_cast<__mmask16>(~tail(lo - j));
    if (mrow != nullptr) {
      for (int64_t u = 0; u < 16 && j + u < lim; ++u)
        if (!mrow[(j + u) * mstride]) ok &= static_cast<__mmask16>(~(1u << u));
    }
    return ok;
  };
  const __m512 cv = _mm512_set1_ps(c);
  __m512 mx = _mm512_set1_ps(NEG_INF);
  for (int64_t j = 0; j < lim; j += 16) {
    const __mmask16 ok = allowed(j);
    mx = _mm512_mask_max_ps(mx, ok, mx, _mm512_mul_ps(_mm512_maskz_loadu_ps(ok, s + j), cv));
  }
  const float row_max = _mm512_reduce_max_ps(mx);
  const float m_new = row_max > m ? row_max : m;
  std::fill(prow + lim, prow + pw, uint16_t(0));
  if (m_new == NEG_INF) {
    std::fill(prow, prow + lim, uint16_t(0));
    return -1.0f;
  }
  const __m512 neg_m = _mm512_set1_ps(-m_new);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < lim; j += 16) {
    const __mmask16 t = tail(lim - j), ok = lo > j || mrow != nullptr ? allowed(j) : t;
    const __m512 x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(t, s + j), cv, neg_m);
    const __m512 p = exp2_for_p(ok, x);
    sum = _mm512_add_ps(sum, p);
    _mm256_mask_storeu_epi16(prow + j, t, (__m256i)_mm512_cvtneps_pbh(p));
  }
  const float alpha = m == NEG_INF ? 0.0f : std::exp2(m - m_new);
  l = l * alpha + _mm512_reduce_add_ps(sum);
  m = m_new;
  return alpha;
}

BF16_TARGET void scale_row(float* a, int64_t n, float f) {
  const __m512 fv = _mm512_set1_ps(f);
  for (int64_t j = 0; j < n; j += 16) _mm512_storeu_ps(a + j, _mm512_mul_ps(_mm512_loadu_ps(a + j), fv));
}

}  // namespace

bool has_avx512bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

// One work item, as forward_item in _flash_fused.cpp: query rows [q0, q1) of head h of batch b.
// q, k, v: bfloat16 with contiguous rows; out: bfloat16 (B, H, Tq, d) contiguous; lse: float32.
BF16_TARGET void forward_item_bf16(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const c10::optional<at::Tensor>& mask, at::Tensor out, at::Tensor lse, int64_t b,
                                   int64_t h, int64_t q0, int64_t q1, const std::vector<int64_t>& band_spec,
                                   double q_scale, int64_t block_k, int64_t diagonal_chunk) {
  const Band band(band_spec);
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 && k.scalar_type() == at::kBFloat16 &&
                  v.scalar_type() == at::kBFloat16 && out.scalar_type() == at::kBFloat16 &&
                  lse.scalar_type() == at::kFloat, "forward_item_bf16: bf16 q, k, v, out and float32 lse");
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1 && out.is_contiguous() && lse.is_contiguous(),
              "forward_item_bf16: rows must be contiguous");
  TORCH_CHECK(!mask.has_value() || (mask->scalar_type() == at::kByte && mask->dim() == 4),
              "mask must be a uint8 (B, H, Tq, Tk) view");
  constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
  const int64_t heads = q.size(1), kv_heads = k.size(1), d = q.size(3);
  const int64_t hk = h / (heads / kv_heads), rows = q1 - q0;
  const int64_t k_begin = band.lo(q0), k_end = band.hi(q1 - 1);  // the keys some row may see
  const int64_t dp = round_up(d, 2), dw = round_up(d, NR);
  const int64_t bk = std::min(block_k, std::max<int64_t>(k_end - k_begin, 1));
  const int64_t sw = round_up(bk, NR), pw = round_up(bk, 2);
  thread_local std::vector<uint16_t> qbuf, pbuf;
  thread_local std::vector<uint32_t> kbuf, vbuf;
  thread_local std::vector<float> sbuf, acc;
  qbuf.assign(rows * dp, 0);
  pbuf.resize(rows * pw);
  kbuf.resize(sw * dp / 2);
  vbuf.resize(dw * pw / 2);
  sbuf.resize(std::min(rows, diagonal_chunk) * sw);
  acc.assign(rows * dw, 0.0f);
  std::vector<float> m(rows, NEG_INF), l(rows, 0.0f);
  const auto* qp = reinterpret_cast<const uint16_t*>(q.data_ptr<at::BFloat16>()) + b * q.stride(0) + h * q.stride(1);
  const auto* kp = reinterpret_cast<const uint16_t*>(k.data_ptr<at::BFloat16>()) + b * k.stride(0) + hk * k.stride(1);
  const auto* vp = reinterpret_cast<const uint16_t*>(v.data_ptr<at::BFloat16>()) + b * v.stride(0) + hk * v.stride(1);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(&qbuf[r * dp], qp + (q0 + r) * q.stride(2), d * sizeof(uint16_t));
  const uint8_t* mbase = nullptr;
  int64_t ms_q = 0, ms_k = 0;
  if (mask.has_value()) {
    mbase = mask->data_ptr<uint8_t>() + b * mask->stride(0) + h * mask->stride(1);
    ms_q = mask->stride(2), ms_k = mask->stride(3);
  }
  const float c = static_cast<float>(q_scale);
  // Rows [r0, r1) against keys [kb + c0, kb + c1) of the packed block starting at key kb; c0 is a multiple
  // of NR (a panel of packed K^T, an even pair of packed V).
  int64_t v_pairs = 0;  // pairs of keys per packed V panel (of the current block)
  auto tile = [&](int64_t r0, int64_t r1, int64_t kb, int64_t c0, int64_t c1) {
    const int64_t n = r1 - r0, need = c1 - c0;
    gemm(n, (need + NR - 1) / NR, dp / 2, dp / 2, &qbuf[r0 * dp], dp, kbuf.data() + c0 / NR * (dp / 2) * NR,
         sbuf.data(), sw, false);
    bool any = false;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = q0 + r;
      int64_t lo = 0, lim = 0;
      clip(band, i, kb + c0, need, lo, lim);
      const uint8_t* mrow = mbase ? mbase + i * ms_q + (kb + c0) * ms_k : nullptr;
      const float alpha = softmax_row(&sbuf[(r - r0) * sw], &pbuf[r * pw], lo, lim, round_up(need, 2), mrow, ms_k, c,
                                      m[r], l[r]);
      if (alpha >= 0.0f) any = true;
      if (alpha >= 0.0f && alpha != 1.0f) scale_row(&acc[r * dw], dw, alpha);
    }
    if (any) {
      gemm(n, dw / NR, (need + 1) / 2, v_pairs, &pbuf[r0 * pw], pw, vbuf.data() + c0 / 2 * NR, &acc[r0 * dw], dw,
           true);
    }
  };
  for (int64_t kb = k_begin; kb < k_end; kb += bk) {
    const int64_t cols = std::min(kb + bk, k_end) - kb;
    pack_kt(kp + kb * k.stride(2), k.stride(2), cols, d, kbuf.data());
    pack_v(vp + kb * v.stride(2), v.stride(2), cols, d, vbuf.data());
    v_pairs = (cols + 1) / 2;
    // In chunks of diagonal_chunk rows, each against only the keys its rows may see (from the panel
    // holding the first): a chunk's score tile stays in L2, and most of what lies outside the band
    // (the causal diagonal's upper triangle, a window's edges) is skipped.
    for (int64_t r0 = 0; r0 < rows; r0 += diagonal_chunk) {
      const int64_t r1 = std::min(r0 + diagonal_chunk, rows);
      const int64_t a = std::max(kb, band.lo(q0 + r0)), e = std::min(kb + cols, band.hi(q0 + r1 - 1));
      if (e > a) tile(r0, r1, kb, (a - kb) / NR * NR, e - kb);
    }
  }
  auto* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>()) + (b * heads + h) * out.size(2) * d;
  float* lse_p = lse.data_ptr<float>() + (b * heads + h) * out.size(2);
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    uint16_t* orow = op + (q0 + r) * d;
    for (int64_t j = 0; j < d; j += 16) {
      const __mmask16 t = tail(d - j);
      const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(t, &acc[r * dw + j]), _mm512_set1_ps(inv));
      _mm256_mask_storeu_epi16(orow + j, t, (__m256i)_mm512_cvtneps_pbh(x));
    }
    lse_p[q0 + r] = l[r] > 0.0f ? (m[r] + std::log2(l[r])) * static_cast<float>(M_LN2) : NEG_INF;
  }
}

// _flash_bf16_backward.cpp
void backward_item_bf16(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
                        const at::Tensor& lse2, const at::Tensor& delta, const c10::optional<at::Tensor>& mask,
                        at::Tensor dq, at::Tensor dk, at::Tensor dv, int64_t b, int64_t hk, int64_t k0, int64_t k1,
                        int64_t qmin, int64_t qmax, const std::vector<int64_t>& band, double c, double scale,
                        int64_t block_q);

// _flash_f32.cpp
bool has_avx512f();
void forward_item_f32(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const c10::optional<at::Tensor>& mask, at::Tensor out, at::Tensor lse, int64_t b, int64_t h,
                      int64_t q0, int64_t q1, const std::vector<int64_t>& band_spec, double q_scale, int64_t block_k,
                      int64_t diagonal_chunk);

// A module of its own, built apart from the MKL float32 kernels: a compiler without AVX512_BF16
// intrinsics fails this build only, and bf16 and float32 input then take the MKL float32 path.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("has_avx512bf16", &has_avx512bf16, "Whether this CPU runs the bf16 kernel (AVX512_BF16)");
  module.def("forward_item_bf16", &forward_item_bf16, "One work item of the bf16 forward (AVX512_BF16)",
             pybind11::call_guard<pybind11::gil_scoped_release>());
  module.def("has_avx512f", &has_avx512f, "Whether this CPU runs the AVX-512 float32 forward");
  module.def("forward_item_f32", &forward_item_f32, "One work item of the AVX-512 float32 forward",
             pybind11::call_guard<pybind11::gil_scoped_release>());
  module.def("backward_item_bf16", &backward_item_bf16, "backward_item on the bf16 units (AVX512_BF16)",
             pybind11::call_guard<pybind11::gil_scoped_release>());
}
