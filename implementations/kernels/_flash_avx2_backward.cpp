// attnbench's FlashAttention-2 backward on AVX2 + FMA with its own tile GEMMs (tiled_fused's avx2 tier),
// for float32 input and for bf16 input converted to float32 as it is loaded; float32 arithmetic.
//
// The work item and the partition are those of _flash_backward.cpp (keys [k0, k1) of kv head hk: dK, dV
// private to the item, dQ into the worker's own float32 buffer); the GEMMs are those of the bf16
// backward (_flash_bf16_backward.cpp) on the 6 x 16 kernel of _flash_avx2.h:
//   S = Q K^T, dP = dO V^T (B = K^T, V^T packed once per item), dQ += dS K (B = K packed once),
//   dV^T += dO^T P, dK^T += Q^T dS (B = P, dS written straight into the packed layout; computing the
//   transposes avoids a strided scatter of P^T and dS^T), transposed at the end.
// Why not MKL (the generic tier): each of the five GEMMs of a tile packs its operands on every call.
#include <torch/extension.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "_flash_avx2.h"
#include "_flash_band.h"
#include "_flash_exp2.h"
#include "_flash_items.h"
#include "_flash_pack.h"

#if defined(__AVX2__) && defined(__FMA__)
using namespace attnbench_avx2;  // NOLINT: the kernel's other half
using attnbench_pack::base;
using attnbench_pack::mask_row;
using attnbench_pack::to_float;
using attnbench_band::Band;
using attnbench_band::clip;

namespace {

// Row r: p = 2^(c s - lse2) on allowed keys (lo <= j < lim and the mask), else 0; ds = p (dp - delta)
// written over dp; both also into column block j / 16 of the packed B operands (row r of panels of
// `kstride` rows), for j < sw.
void p_and_ds(const float* s, float* dp, int64_t sw, int64_t lo, int64_t lim, const uint8_t* mrow, int64_t ms,
              float c, float lse2, float delta, float* p_pack, float* ds_pack, int64_t r, int64_t kstride) {
  const __m256 cv = _mm256_set1_ps(c), lv = _mm256_set1_ps(lse2), dv = _mm256_set1_ps(delta);
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t j = 0; j < sw; j += 8) {
    __m256 p = zero, ds = zero;
    if (j + 8 > lo && j < lim) {
      const __m256 x = _mm256_min_ps(_mm256_fmsub_ps(_mm256_loadu_ps(s + j), cv, lv), zero);
      p = _mm256_and_ps(allowed(j, lo, lim, mrow, ms), exp2_nonpositive(x));
      ds = _mm256_mul_ps(p, _mm256_sub_ps(_mm256_loadu_ps(dp + j), dv));
    }
    _mm256_storeu_ps(dp + j, ds);
    const int64_t at = (j / NR) * kstride * NR + r * NR + j % NR;
    _mm256_storeu_ps(p_pack + at, p);
    _mm256_storeu_ps(ds_pack + at, ds);
  }
}

template <typename T>
void backward_rows(const attnbench_items::BackwardParams& p) {
  const at::Tensor &q = p.q, &k = p.k, &v = p.v, &dout = p.dout, &lse2 = p.lse2, &delta = p.delta;
  const c10::optional<at::Tensor>& mask = p.mask;
  at::Tensor &dq = p.dq, &dk = p.dk, &dv = p.dv;
  const Band& band = p.band;
  const int64_t b = p.b, hk = p.hk, k0 = p.k0, k1 = p.k1, block_q = p.block_q;
  const int64_t qmin = p.qmin, qmax = p.qmax;
  const float c = p.c, scale = p.scale;
  const int64_t heads = q.size(1), group = heads / k.size(1), tq = q.size(2), d = q.size(3), cols = k1 - k0;
  const int64_t dw = round_up(d, NR), sw = round_up(cols, NR), panels = sw / NR;
  const int64_t first = band.first_row(qmin, k0), last = band.last_row(qmax, k1);  // the rows that see these keys
  thread_local std::vector<float> kt, vt, kv, p_pack, ds_pack, qbuf, dobuf, qt, dot, sbuf, dpbuf, dqt, dkt, dvt;
  kt.resize(sw * d), vt.resize(sw * d), kv.resize(dw * cols);
  p_pack.resize(sw * block_q), ds_pack.resize(sw * block_q);
  qbuf.resize(block_q * d), dobuf.resize(block_q * d), qt.resize(d * block_q), dot.resize(d * block_q);
  sbuf.resize(block_q * sw), dpbuf.resize(block_q * sw), dqt.resize(block_q * dw);
  dkt.assign(d * sw, 0.0f), dvt.assign(d * sw, 0.0f);  // dK^T and dV^T (d x keys)
  const T* kp = base<T>(k, b, hk) + k0 * k.stride(2);
  const T* vp = base<T>(v, b, hk) + k0 * v.stride(2);
  attnbench_pack::pack_kt<NR>(kp, k.stride(2), cols, d, kt.data());
  attnbench_pack::pack_kt<NR>(vp, v.stride(2), cols, d, vt.data());
  attnbench_pack::pack_v<NR>(kp, k.stride(2), cols, d, kv.data());
  const __m256 sv = _mm256_set1_ps(scale);
  const int64_t ms = mask.has_value() ? mask->stride(3) : 0;
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const float* lse_p = lse2.data_ptr<float>() + (b * heads + h) * tq;
    const float* delta_p = delta.data_ptr<float>() + (b * heads + h) * tq;
    for (int64_t q0 = first; q0 < last; q0 += block_q) {
      const int64_t rows = std::min(block_q, last - q0);
      const int64_t lq = q.stride(2), lo_ = dout.stride(2);
      const T* qp = base<T>(q, b, h) + q0 * lq;
      const T* dop = base<T>(dout, b, h) + q0 * lo_;
      // The rows as float32, and Q^T, dO^T (d x rows); raw pointers: through the thread_local vectors
      // and Tensor::stride, GCC reloaded both on every element (a tenth of the backward).
      float *qb = qbuf.data(), *gb = dobuf.data(), *qtb = qt.data(), *gtb = dot.data();
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t u = 0; u < d; ++u) {
          const float qv = to_float(qp[r * lq + u]), gv = to_float(dop[r * lo_ + u]);
          qb[r * d + u] = qv, gb[r * d + u] = gv;
          qtb[u * rows + r] = qv, gtb[u * rows + r] = gv;
        }
      }
      gemm(rows, panels, d, d, qbuf.data(), d, kt.data(), sbuf.data(), sw, false);
      gemm(rows, panels, d, d, dobuf.data(), d, vt.data(), dpbuf.data(), sw, false);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = q0 + r;
        int64_t lo = 0, lim = 0;
        clip(band, i, k0, cols, lo, lim);
        p_and_ds(&sbuf[r * sw], &dpbuf[r * sw], sw, lo, lim, mask_row(mask, b, h, i, k0), ms, c, lse_p[i], delta_p[i], p_pack.data(),
                 ds_pack.data(), r, rows);
      }
      gemm(d, panels, rows, rows, dot.data(), rows, p_pack.data(), dvt.data(), sw, true);
      gemm(d, panels, rows, rows, qt.data(), rows, ds_pack.data(), dkt.data(), sw, true);
      gemm(rows, dw / NR, cols, cols, dpbuf.data(), sw, kv.data(), dqt.data(), dw, false);
      float* dq_p = dq.data_ptr<float>() + ((b * heads + h) * tq + q0) * d;
      for (int64_t r = 0; r < rows; ++r) {
        int64_t j = 0;
        for (; j + 8 <= d; j += 8) {
          const __m256 x = _mm256_fmadd_ps(_mm256_loadu_ps(&dqt[r * dw + j]), sv, _mm256_loadu_ps(dq_p + r * d + j));
          _mm256_storeu_ps(dq_p + r * d + j, x);
        }
        for (; j < d; ++j) dq_p[r * d + j] += scale * dqt[r * dw + j];
      }
    }
  }
  float* dk_p = dk.data_ptr<float>() + ((b * k.size(1) + hk) * k.size(2) + k0) * d;
  float* dv_p = dv.data_ptr<float>() + ((b * k.size(1) + hk) * k.size(2) + k0) * d;
  const float *dkb = dkt.data(), *dvb = dvt.data();
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t u = 0; u < d; ++u) {
      dk_p[j * d + u] = scale * dkb[u * sw + j];
      dv_p[j * d + u] = dvb[u * sw + j];
    }
  }
}

}  // namespace

// q, k, v, dout: float32 or bf16 (one dtype) with contiguous rows; lse2 (base 2), delta, dq, dk, dv:
// contiguous float32.
void backward_avx2(const attnbench_items::BackwardParams& p) {
  const auto dt = p.q.scalar_type();
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&p.q, &p.k, &p.v, &p.dout}) {
    TORCH_CHECK(t->scalar_type() == dt && (dt == at::kFloat || dt == at::kBFloat16) && t->stride(3) == 1,
                "backward_avx2: q, k, v, dout float32 or bf16 (one dtype) with contiguous rows");
  }
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&p.lse2, &p.delta, &p.dq, &p.dk, &p.dv}) {
    TORCH_CHECK(t->scalar_type() == at::kFloat && t->is_contiguous(), "backward_avx2: contiguous float32");
  }
  if (dt == at::kFloat) {
    backward_rows<float>(p);
  } else {
    backward_rows<uint16_t>(p);
  }
}

#else  // no AVX2 + FMA in this build: the caller takes the generic path

void backward_avx2(const attnbench_items::BackwardParams&) {
  TORCH_CHECK(false, "backward_avx2: this build has no AVX2 + FMA");
}

#endif
