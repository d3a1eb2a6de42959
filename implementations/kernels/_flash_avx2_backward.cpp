// attnbench's FlashAttention-2 backward on AVX2 + FMA with its own tile GEMMs (tiled_fused's avx2 tier),
// for float32 input and for bf16 input converted to float32 as it is loaded; float32 arithmetic.
//
// The work item is _flash_backward.h's; its GEMMs run on the 6 x 16 kernel of _flash_avx2.h, as the bf16
// kernel's on its own (_flash_bf16_backward.cpp):
//   S = Q K^T, dP = dO V^T (B = K^T, V^T packed once per item), dQ += dS K (B = K packed once),
//   dV^T += dO^T P, dK^T += Q^T dS (B = P, dS written straight into the packed layout; computing the
//   transposes avoids a strided scatter of P^T and dS^T), transposed at the end.
// Why not MKL (the generic tier): each of the five GEMMs of a tile packs its operands on every call.
// Part of the baseline extension, compiled at the avx2 level where the CPU has it (_cpp_build.ISAS);
// elsewhere it compiles to a stub the loader never offers, and the caller takes the generic path.
#include <torch/extension.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "_flash_avx2.h"
#include "_flash_backward.h"
#include "_flash_exp2.h"
#include "_flash_items.h"
#include "_flash_pack.h"

#if defined(__AVX2__) && defined(__FMA__)

namespace {

using attnbench_avx2::NR;
using attnbench_backward::Geometry;
using attnbench_backward::QueryRow;
using attnbench_pack::base;
using attnbench_pack::round_up;
using attnbench_pack::to_float;

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
      p = _mm256_and_ps(attnbench_avx2::allowed(j, lo, lim, mrow, ms), exp2_nonpositive(x));
      ds = _mm256_mul_ps(p, _mm256_sub_ps(_mm256_loadu_ps(dp + j), dv));
    }
    _mm256_storeu_ps(dp + j, ds);
    const int64_t at = (j / NR) * kstride * NR + r * NR + j % NR;
    _mm256_storeu_ps(p_pack + at, p);
    _mm256_storeu_ps(ds_pack + at, ds);
  }
}

// Per worker thread, reused across items: no fresh pages per item.
struct Buffers {
  std::vector<float> kt, vt, kv, p_pack, ds_pack, qbuf, dobuf, qt, dot, sbuf, dpbuf, dqt, dkt, dvt;
};

struct Kernel {
  static constexpr bool float32_input = true, bf16_input = true, contiguous_rows = true;
  static constexpr int row_step = 1;

  template <typename T>
  struct Item {
    const attnbench_items::BackwardParams& p;
    const Geometry& g;
    Buffers& w;
    const int64_t dw, sw, panels;
    int64_t rows = 0;

    static Buffers& buffers() {
      thread_local Buffers b;
      return b;
    }

    Item(const attnbench_items::BackwardParams& p_, const Geometry& g_)
        : p(p_), g(g_), w(buffers()), dw(round_up(g.d, NR)), sw(round_up(g.cols, NR)), panels(sw / NR) {
      const int64_t d = g.d, cols = g.cols, block_q = p.block_q;
      w.kt.resize(sw * d), w.vt.resize(sw * d), w.kv.resize(dw * cols);
      w.p_pack.resize(sw * block_q), w.ds_pack.resize(sw * block_q);
      w.qbuf.resize(block_q * d), w.dobuf.resize(block_q * d), w.qt.resize(d * block_q), w.dot.resize(d * block_q);
      w.sbuf.resize(block_q * sw), w.dpbuf.resize(block_q * sw), w.dqt.resize(block_q * dw);
      w.dkt.assign(d * sw, 0.0f), w.dvt.assign(d * sw, 0.0f);  // dK^T and dV^T (d x keys)
      const T* kp = base<T>(p.k, p.b, p.hk) + p.k0 * p.k.stride(2);
      const T* vp = base<T>(p.v, p.b, p.hk) + p.k0 * p.v.stride(2);
      attnbench_pack::pack_kt<NR>(kp, p.k.stride(2), cols, d, w.kt.data());
      attnbench_pack::pack_kt<NR>(vp, p.v.stride(2), cols, d, w.vt.data());
      attnbench_pack::pack_v<NR>(kp, p.k.stride(2), cols, d, w.kv.data());
    }

    // The rows as float32, and Q^T, dO^T (d x rows); raw pointers: through the thread_local vectors and
    // Tensor::stride, GCC reloaded both on every element (a tenth of the backward).
    void load_rows(int64_t h, int64_t q0, int64_t n) {
      rows = n;
      const int64_t d = g.d, lq = p.q.stride(2), lo = p.dout.stride(2);
      const T* qp = base<T>(p.q, p.b, h) + q0 * lq;
      const T* dop = base<T>(p.dout, p.b, h) + q0 * lo;
      float *qb = w.qbuf.data(), *gb = w.dobuf.data(), *qtb = w.qt.data(), *gtb = w.dot.data();
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t u = 0; u < d; ++u) {
          const float qv = to_float(qp[r * lq + u]), gv = to_float(dop[r * lo + u]);
          qb[r * d + u] = qv, gb[r * d + u] = gv;
          qtb[u * n + r] = qv, gtb[u * n + r] = gv;
        }
      }
    }
    void scores() {
      attnbench_avx2::gemm(rows, panels, g.d, g.d, w.qbuf.data(), g.d, w.kt.data(), w.sbuf.data(), sw, false);
      attnbench_avx2::gemm(rows, panels, g.d, g.d, w.dobuf.data(), g.d, w.vt.data(), w.dpbuf.data(), sw, false);
    }
    void probabilities_and_ds(const QueryRow& row) {
      p_and_ds(&w.sbuf[row.r * sw], &w.dpbuf[row.r * sw], sw, row.lo, row.lim, row.mrow, g.ms, p.c, row.lse2,
               row.delta, w.p_pack.data(), w.ds_pack.data(), row.r, rows);
    }
    void gradients() {
      attnbench_avx2::gemm(g.d, panels, rows, rows, w.dot.data(), rows, w.p_pack.data(), w.dvt.data(), sw, true);
      attnbench_avx2::gemm(g.d, panels, rows, rows, w.qt.data(), rows, w.ds_pack.data(), w.dkt.data(), sw, true);
    }
    void add_dq(int64_t h, int64_t q0) {
      const int64_t d = g.d;
      attnbench_avx2::gemm(rows, dw / NR, g.cols, g.cols, w.dpbuf.data(), sw, w.kv.data(), w.dqt.data(), dw, false);
      float* dq_p = p.dq.data_ptr<float>() + ((p.b * g.heads + h) * g.tq + q0) * d;
      const float* dqt = w.dqt.data();
      const __m256 sv = _mm256_set1_ps(p.scale);
      for (int64_t r = 0; r < rows; ++r) {
        int64_t j = 0;
        for (; j + 8 <= d; j += 8) {
          const __m256 x = _mm256_fmadd_ps(_mm256_loadu_ps(&dqt[r * dw + j]), sv, _mm256_loadu_ps(dq_p + r * d + j));
          _mm256_storeu_ps(dq_p + r * d + j, x);
        }
        for (; j < d; ++j) dq_p[r * d + j] += p.scale * dqt[r * dw + j];
      }
    }
    void finish() {
      const int64_t d = g.d, at = ((p.b * p.k.size(1) + p.hk) * p.k.size(2) + p.k0) * d;
      float* dk_p = p.dk.data_ptr<float>() + at;
      float* dv_p = p.dv.data_ptr<float>() + at;
      const float *dkb = w.dkt.data(), *dvb = w.dvt.data();
      const float scale = p.scale;
      for (int64_t j = 0; j < g.cols; ++j) {
        for (int64_t u = 0; u < d; ++u) {
          dk_p[j * d + u] = scale * dkb[u * sw + j];
          dv_p[j * d + u] = dvb[u * sw + j];
        }
      }
    }
  };
};

}  // namespace

// q, k, v, dout: float32 or bf16 (converted to float32 as it loads); see backward_item in _flash_backward.h.
void backward_avx2(const attnbench_items::BackwardParams& p) {
  attnbench_backward::backward_item<Kernel>("backward_avx2", p);
}

#else  // no AVX2 + FMA in this build: the caller takes the generic path

void backward_avx2(const attnbench_items::BackwardParams&) {
  TORCH_CHECK(false, "backward_avx2: this build has no AVX2 + FMA");
}

#endif
