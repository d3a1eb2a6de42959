// attnbench's bfloat16 FlashAttention-2 backward on the CPU's bf16 dot-product units (AVX512_BF16).
//
// The work item is _flash_backward.h's. All five tile GEMMs run on the VDPBF16PS kernel of _flash_avx512.h
// with float32 accumulation:
//   S = Q K^T, dP = dO V^T (B = K^T, V^T packed once per item), dQ += dS K (B = K packed once),
//   dV^T += dO^T P, dK^T += Q^T dS (B = P, dS written straight into the packed layout, two rows at a
//   time; computing the transposes avoids a strided scatter of P^T and dS^T), transposed at the end.
// P = 2^(c S - lse2) and dS = P (dP - D) are computed in float32 and rounded to bf16 only as GEMM
// operands (as FlashAttention-2 does on GPUs); the gradients are returned in float32.
// Part of the avx512_bf16 extension (_flash_bf16.cpp), compiled whole at that level (_cpp_build.ISAS).
#include <ATen/native/CPUBlas.h>
#include <torch/extension.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "_flash_backward.h"
#include "_flash_bf16.h"
#include "_flash_items.h"
#include "_flash_pack.h"

namespace {

using attnbench_avx512::Bf16;
using attnbench_avx512::NR;
using attnbench_avx512::tail;
using attnbench_backward::Geometry;
using attnbench_backward::QueryRow;
using attnbench_pack::round_up;

// One row of the tile as p_and_ds_pair reads it: its scores, dP, allowed keys, and where its dS row goes.
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
  p = _mm512_maskz_mov_ps(ok, attnbench_avx512::exp2_nonpositive(_mm512_min_ps(x, _mm512_setzero_ps())));
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

// Two rows (r0, r1; row1 false when r0 is the last, odd row): p = 2^(c s - lse2) on allowed keys
// (lo <= j < lim and the mask), else 0, and ds = p (dp - delta). Writes each dS row as bf16 (zero-padded
// to pw) and both rows of P and dS as one pair of k indices of the packed B operands of
// dV^T += dO^T P and dK^T += Q^T dS (pair `pair` of panels holding `pairs` pairs each).
void p_and_ds_pair(const Row& r0, const Row& r1, bool row1, int64_t cols, int64_t sw, int64_t pw, int64_t ms, float c,
                   uint32_t* p_pack, uint32_t* ds_pack, int64_t pair, int64_t pairs) {
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

// Per worker thread, reused across items.
struct Buffers {
  std::vector<uint32_t> kt, vt, kv, p_pack, ds_pack;
  std::vector<uint16_t> qbuf, dobuf, qt, dot, dsrow;
  std::vector<float> sbuf, dpbuf, dqt, dkt, dvt;
};

// The tile GEMMs: C (m x NR*panels) (+)= A B, B packed in panels of NR columns, each `kstride` pairs deep.
struct Vdp {  // on the bf16 units (VDPBF16PS)
  static void gemm(int64_t m, int64_t panels, int64_t kk, int64_t kstride, const uint16_t* a, int64_t lda,
                   const uint32_t* b, float* c, int64_t ldc, bool add) {
    attnbench_avx512::gemm<Bf16>(m, panels, kk, kstride, a, lda, b, c, ldc, add);
  }
};

struct Brgemm {  // on oneDNN's brgemm (AMX tiles): a panel is a row-major VNNI B of NR columns
  static void gemm(int64_t m, int64_t panels, int64_t kk, int64_t kstride, const uint16_t* a, int64_t lda,
                   const uint32_t* b, float* c, int64_t ldc, bool add) {
    for (int64_t q = 0; q < panels; ++q)
      at::native::cpublas::brgemm(m, NR, 2 * kk, lda, NR, ldc, add, reinterpret_cast<const at::BFloat16*>(a),
                                  reinterpret_cast<const at::BFloat16*>(b + q * kstride * NR), c + q * NR, true);
  }
};

template <class G>
struct KernelOn {
  static constexpr bool float32_input = false, bf16_input = true, contiguous_rows = true;
  static constexpr int row_step = 2;  // the packed P and dS hold pairs of rows

  template <typename T>
  struct Item {
    const attnbench_items::BackwardParams& p;
    const Geometry& g;
    Buffers& w;
    const int64_t dp2, dw, sw, pw, panels;
    int64_t rows = 0, ldt = 0;  // the block's rows, rounded up to pairs

    static Buffers& buffers() {
      thread_local Buffers b;
      return b;
    }

    Item(const attnbench_items::BackwardParams& p_, const Geometry& g_)
        : p(p_),
          g(g_),
          w(buffers()),
          dp2(round_up(g.d, 2)),
          dw(round_up(g.d, NR)),
          sw(round_up(g.cols, NR)),
          pw(round_up(g.cols, 2)),
          panels(sw / NR) {
      const int64_t d = g.d, block_q = p.block_q, bq2 = round_up(block_q, 2);
      w.kt.resize(sw * dp2 / 2), w.vt.resize(sw * dp2 / 2), w.kv.resize(dw * pw / 2);
      w.p_pack.resize(sw * bq2 / 2), w.ds_pack.resize(sw * bq2 / 2);
      w.qbuf.assign(block_q * dp2, 0), w.dobuf.assign(block_q * dp2, 0), w.qt.resize(d * bq2), w.dot.resize(d * bq2);
      w.dsrow.resize(bq2 * pw), w.sbuf.resize(block_q * sw), w.dpbuf.resize(block_q * sw), w.dqt.resize(block_q * dw);
      w.dkt.assign(d * sw, 0.0f), w.dvt.assign(d * sw, 0.0f);  // dK^T and dV^T (d x keys)
      const uint16_t* kp = bf16_ptr(p.k, p.b, p.hk) + p.k0 * p.k.stride(2);
      const uint16_t* vp = bf16_ptr(p.v, p.b, p.hk) + p.k0 * p.v.stride(2);
      attnbench_bf16::pack_kt(kp, p.k.stride(2), g.cols, d, w.kt.data());
      attnbench_bf16::pack_kt(vp, p.v.stride(2), g.cols, d, w.vt.data());
      attnbench_bf16::pack_v(kp, p.k.stride(2), g.cols, d, w.kv.data());
    }

    // The rows, and Q^T, dO^T (d x ldt, an odd last row's partner zero).
    void load_rows(int64_t h, int64_t q0, int64_t n) {
      rows = n, ldt = round_up(n, 2);
      const int64_t d = g.d, lq = p.q.stride(2), lo = p.dout.stride(2);
      const uint16_t* qp = bf16_ptr(p.q, p.b, h) + q0 * lq;
      const uint16_t* dop = bf16_ptr(p.dout, p.b, h) + q0 * lo;
      for (int64_t r = 0; r < ldt; ++r) {
        for (int64_t u = 0; u < d; ++u) {
          const uint16_t qv = r < n ? qp[r * lq + u] : 0, dv = r < n ? dop[r * lo + u] : 0;
          if (r < n) w.qbuf[r * dp2 + u] = qv, w.dobuf[r * dp2 + u] = dv;
          w.qt[u * ldt + r] = qv, w.dot[u * ldt + r] = dv;
        }
      }
    }
    void scores() {
      const int64_t kk = dp2 / 2;
      G::gemm(rows, panels, kk, kk, w.qbuf.data(), dp2, w.kt.data(), w.sbuf.data(), sw, false);
      G::gemm(rows, panels, kk, kk, w.dobuf.data(), dp2, w.vt.data(), w.dpbuf.data(), sw, false);
    }
    Row tile_row(const QueryRow& q) {
      return Row{&w.sbuf[q.r * sw], &w.dpbuf[q.r * sw], q.lo, q.lim, q.mrow, q.lse2, q.delta, &w.dsrow[q.r * pw]};
    }
    void probabilities_and_ds(const QueryRow& r0, const QueryRow& r1, bool second) {
      p_and_ds_pair(tile_row(r0), tile_row(r1), second, g.cols, sw, pw, g.ms, p.c, w.p_pack.data(), w.ds_pack.data(),
                    r0.r / 2, ldt / 2);
    }
    void gradients() {
      const int64_t kk = ldt / 2;
      G::gemm(g.d, panels, kk, kk, w.dot.data(), ldt, w.p_pack.data(), w.dvt.data(), sw, true);
      G::gemm(g.d, panels, kk, kk, w.qt.data(), ldt, w.ds_pack.data(), w.dkt.data(), sw, true);
    }
    void add_dq(int64_t h, int64_t q0) {
      const int64_t d = g.d;
      G::gemm(rows, dw / NR, pw / 2, pw / 2, w.dsrow.data(), pw, w.kv.data(), w.dqt.data(), dw,
                                   false);
      float* dq_p = p.dq.data_ptr<float>() + ((p.b * g.heads + h) * g.tq + q0) * d;
      const __m512 sv = _mm512_set1_ps(p.scale);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < d; j += 16) {
          const __mmask16 t = tail(d - j);
          const __m512 x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(t, &w.dqt[r * dw + j]), sv,
                                           _mm512_maskz_loadu_ps(t, dq_p + r * d + j));
          _mm512_mask_storeu_ps(dq_p + r * d + j, t, x);
        }
      }
    }
    void finish() {
      const int64_t d = g.d, at = ((p.b * p.k.size(1) + p.hk) * p.k.size(2) + p.k0) * d;
      float* dk_p = p.dk.data_ptr<float>() + at;
      float* dv_p = p.dv.data_ptr<float>() + at;
      for (int64_t j = 0; j < g.cols; ++j) {
        for (int64_t u = 0; u < d; ++u) {
          dk_p[j * d + u] = p.scale * w.dkt[u * sw + j];
          dv_p[j * d + u] = w.dvt[u * sw + j];
        }
      }
    }
  };
};

}  // namespace

// q, k, v, dout: bf16 with contiguous rows; see backward_item in _flash_backward.h.
using Kernel = KernelOn<Vdp>;

void backward_bf16(const attnbench_items::BackwardParams& p) {
  attnbench_backward::backward_item<Kernel>("backward_bf16", p);
}

// The same item with its five GEMMs on oneDNN's brgemm, panel by panel (AMX tiles where could_pack says so).
void backward_amx(const attnbench_items::BackwardParams& p) {
  attnbench_backward::backward_item<KernelOn<Brgemm>>("backward_amx", p);
  at::native::cpublas::brgemm_release(true);
}
