// attnbench's bfloat16 FlashAttention-2 backward on the CPU's bf16 dot-product units (AVX512_BF16).
//
// The work item and the partition are those of _flash_backward.cpp (keys [k0, k1) of kv head hk:
// dK, dV private to the item, dQ into the worker's own float32 buffer). All five tile GEMMs run on
// the VDPBF16PS kernel of _flash_avx512.h with float32 accumulation:
//   S = Q K^T, dP = dO V^T (B = K^T, V^T packed once per item), dQ += dS K (B = K packed once),
//   dV^T += dO^T P, dK^T += Q^T dS (B = P, dS written straight into the packed layout, two rows at a
//   time; computing the transposes avoids a strided scatter of P^T and dS^T), transposed at the end.
// P = 2^(c S - lse2) and dS = P (dP - D) are computed in float32 and rounded to bf16 only as GEMM
// operands (as FlashAttention-2 does on GPUs); the gradients are returned in float32.
#include <torch/extension.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "_flash_band.h"
#include "_flash_bf16.h"
#include "_flash_items.h"
#include "_flash_pack.h"

using namespace attnbench_bf16;    // NOLINT: this file is the kernel's other half
using namespace attnbench_avx512;  // NOLINT
using attnbench_pack::mask_row;
using attnbench_band::Band;
using attnbench_band::clip;

namespace {

// Two rows (r, r + 1; row1 false when r is the last, odd row): p = 2^(c s - lse2) on allowed keys
// (lo <= j < lim and the mask), else 0, and ds = p (dp - delta). Writes each dS row as bf16 (zero-padded
// to pw) and both rows of P and dS as one pair of k indices of the packed B operands of
// dV^T += dO^T P and dK^T += Q^T dS (pair `pair` of panels holding `pairs` pairs each).
struct Row {
  const float* s;
  const float* dp;
  int64_t lo, lim;  // allowed keys [lo, lim) of the key block
  const uint8_t* mrow;
  float lse2, delta;
  uint16_t* ds_row;
};

inline void p_and_ds(const Row& row, int64_t j, int64_t cols, int64_t ms, __m512 cv, __m512& p, __m512& ds) {
  const __mmask16 t = cols > j ? tail(cols - j) : __mmask16(0);
  __mmask16 ok = row.lim > j ? tail(row.lim - j) : __mmask16(0);
  if (row.lo > j) ok &= static_cast<__mmask16>(~tail(row.lo - j));
  if (row.mrow != nullptr) {
    for (int64_t u = 0; u < 16 && j + u < cols; ++u) ok &= row.mrow[(j + u) * ms] ? 0xFFFF : ~(1u << u);
  }
  const __m512 x = _mm512_fmsub_ps(_mm512_maskz_loadu_ps(t, row.s + j), cv, _mm512_set1_ps(row.lse2));
  p = _mm512_maskz_mov_ps(ok, exp2_nonpositive(_mm512_min_ps(x, _mm512_setzero_ps())));
  ds = _mm512_mul_ps(p, _mm512_sub_ps(_mm512_maskz_loadu_ps(t, row.dp + j), _mm512_set1_ps(row.delta)));
}

// 32 bf16 lanes of (a[0], b[0], a[1], b[1], ...): one pair of k indices for 16 columns.
inline __m512i interleave(__m512 a, __m512 b) {
  const __m512i ab = _mm512_inserti64x4(_mm512_castsi256_si512((__m256i)_mm512_cvtneps_pbh(a)),
                                        (__m256i)_mm512_cvtneps_pbh(b), 1);
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                       21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, ab);
}

void p_and_ds_pair(const Row& r0, const Row& r1, bool row1, int64_t cols, int64_t sw, int64_t pw,
                               int64_t ms, float c, uint32_t* p_pack, uint32_t* ds_pack, int64_t pair, int64_t pairs) {
  const __m512 cv = _mm512_set1_ps(c);
  for (int64_t j = 0; j < sw; j += 16) {
    __m512 p0, ds0, p1 = _mm512_setzero_ps(), ds1 = _mm512_setzero_ps();
    p_and_ds(r0, j, cols, ms, cv, p0, ds0);
    if (row1) p_and_ds(r1, j, cols, ms, cv, p1, ds1);
    if (j < pw) {
      const __mmask16 t = tail(pw - j);
      _mm256_mask_storeu_epi16(r0.ds_row + j, t, (__m256i)_mm512_cvtneps_pbh(ds0));
      if (row1) _mm256_mask_storeu_epi16(r1.ds_row + j, t, (__m256i)_mm512_cvtneps_pbh(ds1));
    }
    const int64_t at = (j / NR) * pairs * NR + pair * NR + j % NR;
    _mm512_storeu_si512(p_pack + at, interleave(p0, p1));
    _mm512_storeu_si512(ds_pack + at, interleave(ds0, ds1));
  }
}

const uint16_t* bf16_ptr(const at::Tensor& t, int64_t b, int64_t h) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>()) + b * t.stride(0) + h * t.stride(1);
}

// One item (BackwardParams, _flash_items.h) on the bf16 units.
void backward_rows(const attnbench_items::BackwardParams& p) {
  const at::Tensor &q = p.q, &k = p.k, &v = p.v, &dout = p.dout, &lse2 = p.lse2, &delta = p.delta;
  const c10::optional<at::Tensor>& mask = p.mask;
  at::Tensor &dq = p.dq, &dk = p.dk, &dv = p.dv;
  const Band& band = p.band;
  const int64_t b = p.b, hk = p.hk, k0 = p.k0, k1 = p.k1, block_q = p.block_q;
  const int64_t qmin = p.qmin, qmax = p.qmax;
  const float c = p.c, scale = p.scale;
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&q, &k, &v, &dout}) {
    TORCH_CHECK(t->scalar_type() == at::kBFloat16 && t->stride(3) == 1, "backward_bf16: bf16 rows");
  }
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&lse2, &delta, &dq, &dk, &dv}) {
    TORCH_CHECK(t->scalar_type() == at::kFloat && t->is_contiguous(), "backward_bf16: contiguous float32");
  }
  const int64_t heads = q.size(1), group = heads / k.size(1), tq = q.size(2), d = q.size(3), cols = k1 - k0;
  const int64_t dp2 = round_up(d, 2), dw = round_up(d, NR), sw = round_up(cols, NR), pw = round_up(cols, 2);
  const int64_t first = band.first_row(qmin, k0), last = band.last_row(qmax, k1);  // the rows that see these keys
  const int64_t bq2 = round_up(block_q, 2), panels = sw / NR;
  thread_local std::vector<uint32_t> kt, vt, kv, p_pack, ds_pack;
  thread_local std::vector<uint16_t> qbuf, dobuf, qt, dot, dsrow;
  thread_local std::vector<float> sbuf, dpbuf, dqt, dkt, dvt;
  kt.resize(sw * dp2 / 2), vt.resize(sw * dp2 / 2), kv.resize(dw * pw / 2);
  p_pack.resize(sw * bq2 / 2), ds_pack.resize(sw * bq2 / 2);
  qbuf.assign(block_q * dp2, 0), dobuf.assign(block_q * dp2, 0), qt.resize(d * bq2), dot.resize(d * bq2);
  dsrow.resize(bq2 * pw), sbuf.resize(block_q * sw), dpbuf.resize(block_q * sw), dqt.resize(block_q * dw);
  dkt.assign(d * sw, 0.0f), dvt.assign(d * sw, 0.0f);  // dK^T and dV^T (d x keys)
  const uint16_t* kp = bf16_ptr(k, b, hk) + k0 * k.stride(2);
  const uint16_t* vp = bf16_ptr(v, b, hk) + k0 * v.stride(2);
  pack_kt(kp, k.stride(2), cols, d, kt.data());
  pack_kt(vp, v.stride(2), cols, d, vt.data());
  pack_v(kp, k.stride(2), cols, d, kv.data());
  const __m512 sv = _mm512_set1_ps(static_cast<float>(scale));
  const int64_t ms = mask.has_value() ? mask->stride(3) : 0;
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const float* lse_p = lse2.data_ptr<float>() + (b * heads + h) * tq;
    const float* delta_p = delta.data_ptr<float>() + (b * heads + h) * tq;
    for (int64_t q0 = first; q0 < last; q0 += block_q) {
      const int64_t rows = std::min(block_q, last - q0), ldt = round_up(rows, 2);
      const uint16_t* qp = bf16_ptr(q, b, h) + q0 * q.stride(2);
      const uint16_t* dop = bf16_ptr(dout, b, h) + q0 * dout.stride(2);
      for (int64_t r = 0; r < ldt; ++r) {  // rows, and Q^T, dO^T (d x ldt, an odd last row's partner zero)
        for (int64_t u = 0; u < d; ++u) {
          const uint16_t qv = r < rows ? qp[r * q.stride(2) + u] : 0, dv = r < rows ? dop[r * dout.stride(2) + u] : 0;
          if (r < rows) qbuf[r * dp2 + u] = qv, dobuf[r * dp2 + u] = dv;
          qt[u * ldt + r] = qv, dot[u * ldt + r] = dv;
        }
      }
      gemm<Bf16>(rows, panels, dp2 / 2, dp2 / 2, qbuf.data(), dp2, kt.data(), sbuf.data(), sw, false);
      gemm<Bf16>(rows, panels, dp2 / 2, dp2 / 2, dobuf.data(), dp2, vt.data(), dpbuf.data(), sw, false);
      auto row = [&](int64_t r) {
        const int64_t i = q0 + r;
        int64_t lo = 0, lim = 0;
        clip(band, i, k0, cols, lo, lim);
        return Row{&sbuf[r * sw], &dpbuf[r * sw], lo, lim, mask_row(mask, b, h, i, k0), lse_p[i], delta_p[i],
                   &dsrow[r * pw]};
      };
      for (int64_t r = 0; r < rows; r += 2) {
        const bool second = r + 1 < rows;
        p_and_ds_pair(row(r), second ? row(r + 1) : row(r), second, cols, sw, pw, ms, static_cast<float>(c),
                      p_pack.data(), ds_pack.data(), r / 2, ldt / 2);
      }
      gemm<Bf16>(d, panels, ldt / 2, ldt / 2, dot.data(), ldt, p_pack.data(), dvt.data(), sw, true);
      gemm<Bf16>(d, panels, ldt / 2, ldt / 2, qt.data(), ldt, ds_pack.data(), dkt.data(), sw, true);
      gemm<Bf16>(rows, dw / NR, pw / 2, pw / 2, dsrow.data(), pw, kv.data(), dqt.data(), dw, false);
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
      dk_p[j * d + u] = static_cast<float>(scale) * dkt[u * sw + j];
      dv_p[j * d + u] = dvt[u * sw + j];
    }
  }
}

}  // namespace

void backward_bf16(const attnbench_items::BackwardParams& p) { backward_rows(p); }
