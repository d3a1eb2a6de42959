// attnbench's bfloat16 FlashAttention-2 backward on the CPU's bf16 dot-product units (AVX512_BF16).
//
// The work item and the partition are those of _flash_backward.cpp (keys [k0, k1) of kv head hk:
// dK, dV private to the item, dQ into the worker's own float32 buffer). All five tile GEMMs run on
// the VDPBF16PS kernel of _flash_bf16.h with float32 accumulation:
//   S = Q K^T, dP = dO V^T (B = K^T, V^T packed once per item), dV += P^T dO, dK += dS^T Q
//   (B = dO, Q packed per query block), dQ += dS K (B = K packed once per item).
// P = 2^(c S - lse2) and dS = P (dP - D) are computed in float32 and rounded to bf16 only as GEMM
// operands (as FlashAttention-2 does on GPUs); the gradients are returned in float32.
#include <torch/extension.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "_flash_bf16.h"

using namespace attnbench_bf16;  // NOLINT: this file is the kernel's other half

namespace {

// Row r of the tile: p = 2^(c s - lse2) on allowed keys (j < lim and the mask), else 0, and
// ds = p (dp - delta); writes the dS row (bf16, zero-padded to pw) and column r of P^T and dS^T.
BF16_TARGET void p_and_ds_row(const float* s, const float* dp, int64_t cols, int64_t lim, const uint8_t* mrow,
                              int64_t ms, float c, float lse2, float delta, uint16_t* pt, uint16_t* dst, int64_t ldt,
                              uint16_t* ds_row, int64_t pw) {
  const __m512 cv = _mm512_set1_ps(c), lv = _mm512_set1_ps(lse2), dv = _mm512_set1_ps(delta);
  alignas(64) uint16_t pb[16], db[16];
  for (int64_t j = 0; j < cols; j += 16) {
    const __mmask16 t = tail(cols - j);
    __mmask16 ok = lim > j ? tail(lim - j) : __mmask16(0);
    if (mrow != nullptr) {
      for (int64_t u = 0; u < 16 && j + u < cols; ++u) ok &= mrow[(j + u) * ms] ? 0xFFFF : ~(1u << u);
    }
    const __m512 x = _mm512_fmsub_ps(_mm512_maskz_loadu_ps(t, s + j), cv, lv);
    const __m512 p = _mm512_maskz_mov_ps(ok, exp2_nonpositive(_mm512_min_ps(x, _mm512_setzero_ps())));
    const __m512 ds = _mm512_mul_ps(p, _mm512_sub_ps(_mm512_maskz_loadu_ps(t, dp + j), dv));
    const __m256i pbh = (__m256i)_mm512_cvtneps_pbh(p), dbh = (__m256i)_mm512_cvtneps_pbh(ds);
    _mm256_mask_storeu_epi16(ds_row + j, t, dbh);
    _mm256_store_si256(reinterpret_cast<__m256i*>(pb), pbh);
    _mm256_store_si256(reinterpret_cast<__m256i*>(db), dbh);
    for (int64_t u = 0; u < 16 && j + u < cols; ++u) {
      pt[(j + u) * ldt] = pb[u];
      dst[(j + u) * ldt] = db[u];
    }
  }
  std::fill(ds_row + cols, ds_row + pw, uint16_t(0));
}

const uint16_t* bf16_ptr(const at::Tensor& t, int64_t b, int64_t h) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>()) + b * t.stride(0) + h * t.stride(1);
}

}  // namespace

BF16_TARGET void backward_item_bf16(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& dout, const at::Tensor& lse2, const at::Tensor& delta,
                                    const c10::optional<at::Tensor>& mask, at::Tensor dq, at::Tensor dk,
                                    at::Tensor dv, int64_t b, int64_t hk, int64_t k0, int64_t k1, bool causal,
                                    double c, double scale, int64_t block_q) {
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&q, &k, &v, &dout}) {
    TORCH_CHECK(t->scalar_type() == at::kBFloat16 && t->stride(3) == 1, "backward_item_bf16: bf16 rows");
  }
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&lse2, &delta, &dq, &dk, &dv}) {
    TORCH_CHECK(t->scalar_type() == at::kFloat && t->is_contiguous(), "backward_item_bf16: contiguous float32");
  }
  const int64_t heads = q.size(1), group = heads / k.size(1), tq = q.size(2), d = q.size(3), cols = k1 - k0;
  const int64_t dp2 = round_up(d, 2), dw = round_up(d, NR), sw = round_up(cols, NR), pw = round_up(cols, 2);
  const int64_t bq2 = round_up(block_q, 2), panels = sw / NR;
  thread_local std::vector<uint32_t> kt, vt, kv, qv, dov;
  thread_local std::vector<uint16_t> qbuf, dobuf, ptbuf, dstbuf, dsrow;
  thread_local std::vector<float> sbuf, dpbuf, dqt, dk_acc, dv_acc;
  kt.resize(sw * dp2 / 2), vt.resize(sw * dp2 / 2), kv.resize(dw * pw / 2);
  qv.resize(dw * bq2 / 2), dov.resize(dw * bq2 / 2);
  qbuf.assign(block_q * dp2, 0), dobuf.assign(block_q * dp2, 0);
  ptbuf.resize(cols * bq2), dstbuf.resize(cols * bq2), dsrow.resize(block_q * pw);
  sbuf.resize(block_q * sw), dpbuf.resize(block_q * sw), dqt.resize(block_q * dw);
  dk_acc.assign(cols * dw, 0.0f), dv_acc.assign(cols * dw, 0.0f);
  const uint16_t* kp = bf16_ptr(k, b, hk) + k0 * k.stride(2);
  const uint16_t* vp = bf16_ptr(v, b, hk) + k0 * v.stride(2);
  pack_kt(kp, k.stride(2), cols, d, kt.data());
  pack_kt(vp, v.stride(2), cols, d, vt.data());
  pack_v(kp, k.stride(2), cols, d, kv.data());
  const __m512 sv = _mm512_set1_ps(static_cast<float>(scale));
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const float* lse_p = lse2.data_ptr<float>() + (b * heads + h) * tq;
    const float* delta_p = delta.data_ptr<float>() + (b * heads + h) * tq;
    for (int64_t q0 = causal ? k0 / block_q * block_q : 0; q0 < tq; q0 += block_q) {
      const int64_t rows = std::min(block_q, tq - q0), ldt = round_up(rows, 2);
      const uint16_t* qp = bf16_ptr(q, b, h) + q0 * q.stride(2);
      const uint16_t* dop = bf16_ptr(dout, b, h) + q0 * dout.stride(2);
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(&qbuf[r * dp2], qp + r * q.stride(2), d * sizeof(uint16_t));
        std::memcpy(&dobuf[r * dp2], dop + r * dout.stride(2), d * sizeof(uint16_t));
      }
      pack_v(qp, q.stride(2), rows, d, qv.data());
      pack_v(dop, dout.stride(2), rows, d, dov.data());
      gemm(rows, panels, dp2 / 2, dp2 / 2, qbuf.data(), dp2, kt.data(), sbuf.data(), sw, false);
      gemm(rows, panels, dp2 / 2, dp2 / 2, dobuf.data(), dp2, vt.data(), dpbuf.data(), sw, false);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = q0 + r;
        const int64_t lim = causal ? std::max<int64_t>(0, std::min(cols, i - k0 + 1)) : cols;
        const uint8_t* mrow = nullptr;
        if (mask.has_value()) {
          mrow = mask->data_ptr<uint8_t>() + b * mask->stride(0) + h * mask->stride(1) + i * mask->stride(2) +
                 k0 * mask->stride(3);
        }
        p_and_ds_row(&sbuf[r * sw], &dpbuf[r * sw], cols, lim, mrow, mask.has_value() ? mask->stride(3) : 0,
                     static_cast<float>(c), lse_p[i], delta_p[i], &ptbuf[r], &dstbuf[r], ldt, &dsrow[r * pw], pw);
      }
      if (rows % 2 == 1) {  // the zero partner of the last row in each pair of P^T and dS^T
        for (int64_t j = 0; j < cols; ++j) ptbuf[j * ldt + rows] = dstbuf[j * ldt + rows] = 0;
      }
      gemm(cols, dw / NR, ldt / 2, ldt / 2, ptbuf.data(), ldt, dov.data(), dv_acc.data(), dw, true);
      gemm(cols, dw / NR, ldt / 2, ldt / 2, dstbuf.data(), ldt, qv.data(), dk_acc.data(), dw, true);
      gemm(rows, dw / NR, pw / 2, pw / 2, dsrow.data(), pw, kv.data(), dqt.data(), dw, false);
      float* dq_p = dq.data_ptr<float>() + ((b * heads + h) * tq + q0) * d;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < d; j += 16) {
          const __mmask16 t = tail(d - j);
          const __m512 x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(t, &dqt[r * dw + j]), sv,
                                           _mm512_maskz_loadu_ps(t, dq_p + r * d + j));
          _mm512_mask_storeu_ps(dq_p + r * d + j, t, x);
        }
      }
    }
  }
  float* dk_p = dk.data_ptr<float>() + ((b * k.size(1) + hk) * k.size(2) + k0) * d;
  float* dv_p = dv.data_ptr<float>() + ((b * k.size(1) + hk) * k.size(2) + k0) * d;
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t u = 0; u < d; ++u) {
      dk_p[j * d + u] = static_cast<float>(scale) * dk_acc[j * dw + u];
      dv_p[j * d + u] = dv_acc[j * dw + u];
    }
  }
}
