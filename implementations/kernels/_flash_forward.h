// The forward work item of every tiled_fused kernel with its own tile GEMMs (avx2: _flash_avx2.cpp,
// avx512f: _flash_f32.cpp, avx512_bf16: _flash_bf16.cpp): query rows [q0, q1) of head h of batch b
// against the keys their band allows (_flash_band.h), one key block at a time.
//
// K^T and V of a key block are packed once into the GEMM kernel's B panels and serve all the item's
// rows. The rows go in chunks of diagonal_chunk, each against only the keys its rows may see (from the
// panel holding the first): a chunk's score tile stays in L2, and most of what lies outside the band
// (the causal diagonal's upper triangle, a window's edges) is skipped. A tile is S = Q K^T, each row's
// masked online-softmax update (_flash_softmax.h) with the rescale of its accumulator row, O += P V;
// at the end O / l and the log-sum-exp in natural log (-inf for rows no key reaches, whose output is 0).
//
// The kernel K supplies the ISA: NR (columns per B panel), A (GEMM A element: float, or bf16 bits),
// Packed (B element), P (P element), depth(d) (k of S = Q K^T), pairs(n) (k of P V for n keys),
// load_q, pack_kt, pack_v, gemm, softmax_row, scale_row and store_row. Float32Operands below is the
// part the two float32 kernels share. In an anonymous namespace: each translation unit compiles its
// copy for the level of its own extension (_cpp_build.ISAS).
#pragma once

#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "_flash_band.h"
#include "_flash_items.h"
#include "_flash_pack.h"
#include "_flash_softcap.h"

namespace attnbench_forward {
namespace {

inline void store(float* dst, float x) { *dst = x; }
inline void store(uint16_t* dst, float x) { *dst = c10::BFloat16(x).x; }  // round to nearest even

// The float32 kernels' operands (float32 GEMMs on panels of NR columns): Q read in place, or bf16 Q
// converted once per item; K and V converted as they are packed.
template <int64_t NR_>
struct Float32Operands {
  static constexpr int64_t NR = NR_;
  static constexpr bool float32_input = true;
  using A = float;
  using Packed = float;
  using P = float;
  static int64_t depth(int64_t d) { return d; }
  static int64_t pairs(int64_t n) { return n; }

  template <typename T>
  static void load_q(const T* src, int64_t ld, int64_t rows, int64_t d, std::vector<float>& buf, const float*& qp,
                     int64_t& lq) {
    if constexpr (std::is_same_v<T, float>) {
      qp = src, lq = ld;
    } else {
      buf.resize(rows * d);
      float* qb = buf.data();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t u = 0; u < d; ++u) qb[r * d + u] = attnbench_pack::to_float(src[r * ld + u]);
      qp = qb, lq = d;
    }
  }
  template <typename T>
  static void pack_kt(const T* k, int64_t ld, int64_t n, int64_t d, float* out) {
    attnbench_pack::pack_kt<NR>(k, ld, n, d, out);
  }
  template <typename T>
  static void pack_v(const T* v, int64_t ld, int64_t n, int64_t d, float* out) {
    attnbench_pack::pack_v<NR>(v, ld, n, d, out);
  }
  template <typename T>
  static void store_row(T* dst, const float* acc, float inv, int64_t d) {
    for (int64_t j = 0; j < d; ++j) store(dst + j, acc[j] * inv);
  }
};

// Where a column block starts in the packed operands. Panels (the kernels' own GEMMs): K^T in panels of NR
// columns, each `depth` pairs deep; V in panels of NR columns, each a block's pairs of keys deep. Row-major
// (K::ROW_MAJOR, oneDNN's brgemm): K^T as [depth][columns], V as [pairs of keys][dw], VNNI pairs in both.
template <class K, class = void>
struct RowMajorPacks : std::false_type {};
template <class K>
struct RowMajorPacks<K, std::void_t<decltype(K::ROW_MAJOR)>> : std::true_type {};

template <class K>
int64_t kt_offset(int64_t c0, int64_t depth) {
  if constexpr (RowMajorPacks<K>::value) return c0;
  else return c0 / K::NR * depth * K::NR;
}

template <class K>
int64_t v_offset(int64_t c0, int64_t dw) {
  if constexpr (RowMajorPacks<K>::value) return K::pairs(c0) * dw;
  else return K::pairs(c0) * K::NR;
}

template <class K, typename T, typename Tensor, typename OptionalTensor>
void forward_rows(const Tensor& q, const Tensor& k, const Tensor& v, const OptionalTensor& mask, Tensor& out,
                  Tensor& lse, int64_t b, int64_t h, int64_t q0, int64_t q1, const attnbench_band::Band& band, float c,
                  int64_t block_k, int64_t diagonal_chunk, float cap) {
  using attnbench_pack::round_up;
  constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
  constexpr int64_t NR = K::NR;
  const int64_t heads = q.size(1), kv_heads = k.size(1), d = q.size(3);
  const int64_t hk = h / (heads / kv_heads), rows = q1 - q0;
  const int64_t k_begin = band.lo(q0), k_end = band.hi(q1 - 1);  // the keys some row may see
  const int64_t depth = K::depth(d), dw = round_up(d, NR);
  const int64_t bk = std::min(block_k, std::max<int64_t>(k_end - k_begin, 1));
  const int64_t sw = round_up(bk, NR), chunk = std::min(rows, diagonal_chunk);
  thread_local std::vector<typename K::Packed> kbuf, vbuf;
  thread_local std::vector<typename K::A> qbuf;
  thread_local std::vector<typename K::P> pbuf;
  thread_local std::vector<float> sbuf, acc;
  kbuf.resize(sw * depth);
  vbuf.resize(dw * K::pairs(bk));
  sbuf.resize(chunk * sw);
  pbuf.resize(chunk * sw);
  acc.assign(rows * dw, 0.0f);
  std::vector<float> m(rows, NEG_INF), l(rows, 0.0f);
  const typename K::A* qp;
  int64_t lq;
  K::load_q(attnbench_pack::base<T>(q, b, h) + q0 * q.stride(2), q.stride(2), rows, d, qbuf, qp, lq);
  const T* kp = attnbench_pack::base<T>(k, b, hk);
  const T* vp = attnbench_pack::base<T>(v, b, hk);
  const int64_t ms = mask.has_value() ? mask->stride(3) : 0;
  int64_t keys = 0;  // keys in the packed block
  // Rows [r0, r1) against keys [kb + c0, kb + c1) of the packed block at kb; c0 is a multiple of NR.
  auto tile = [&](int64_t r0, int64_t r1, int64_t kb, int64_t c0, int64_t c1) {
    const int64_t n = r1 - r0, need = c1 - c0;
    K::gemm(n, (need + NR - 1) / NR, depth, depth, qp + r0 * lq, lq, kbuf.data() + kt_offset<K>(c0, depth), sbuf.data(),
            sw, false);
    if (cap > 0.0f) {  // S is Q K^T, still without the scale c = scale * log2(e): the cap in those units is cap / scale
      for (int64_t r = 0; r < n; ++r) attnbench_softcap::softcap_row(&sbuf[r * sw], need, cap * float(M_LOG2E) / c);
    }
    bool any = false;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = q0 + r;
      int64_t lo = 0, lim = 0;
      attnbench_band::clip(band, i, kb + c0, need, lo, lim);
      const uint8_t* mrow = attnbench_pack::mask_row(mask, b, h, i, kb + c0);
      const float alpha = K::softmax_row(&sbuf[(r - r0) * sw], &pbuf[(r - r0) * sw], lo, lim, need, mrow, ms, c, m[r],
                                         l[r]);
      if (alpha >= 0.0f) any = true;
      if (alpha >= 0.0f && alpha != 1.0f) K::scale_row(&acc[r * dw], dw, alpha);
    }
    if (any) {
      K::gemm(n, dw / NR, K::pairs(need), K::pairs(keys), pbuf.data(), sw, vbuf.data() + v_offset<K>(c0, dw),
              &acc[r0 * dw], dw, true);
    }
  };
  for (int64_t kb = k_begin; kb < k_end; kb += bk) {
    keys = std::min(kb + bk, k_end) - kb;
    K::pack_kt(kp + kb * k.stride(2), k.stride(2), keys, d, kbuf.data());
    K::pack_v(vp + kb * v.stride(2), v.stride(2), keys, d, vbuf.data());
    for (int64_t r0 = 0; r0 < rows; r0 += diagonal_chunk) {
      const int64_t r1 = std::min(r0 + diagonal_chunk, rows);
      const int64_t a = std::max(kb, band.lo(q0 + r0)), e = std::min(kb + keys, band.hi(q0 + r1 - 1));
      if (e > a) tile(r0, r1, kb, (a - kb) / NR * NR, e - kb);
    }
  }
  T* op = reinterpret_cast<T*>(out.data_ptr()) + (b * heads + h) * out.size(2) * d;
  float* lse_p = lse.template data_ptr<float>() + (b * heads + h) * out.size(2);
  for (int64_t r = 0; r < rows; ++r) {
    K::store_row(op + (q0 + r) * d, &acc[r * dw], l[r] > 0.0f ? 1.0f / l[r] : 0.0f, d);
    lse_p[q0 + r] = l[r] > 0.0f ? (m[r] + std::log2(l[r])) * static_cast<float>(M_LN2) : NEG_INF;
  }
}

// The work item (ForwardParams, _flash_items.h), after checking its arguments: q, k, v, out float32 (when
// K::float32_input) or bf16, one dtype, with contiguous rows (out contiguous (B, H, Tq, d)); lse float32
// (B, H, Tq); mask, if any, a uint8 (B, H, Tq, Tk) view. `name` is the binding's, for the messages.
template <class K>
void forward_item(const char* name, const attnbench_items::ForwardParams& p) {
  const at::Tensor &q = p.q, &k = p.k, &v = p.v, &out = p.out, &lse = p.lse;
  const c10::optional<at::Tensor>& mask = p.mask;
  const int64_t diagonal_chunk = p.diagonal_chunk;
  const auto dt = q.scalar_type();
  TORCH_CHECK(((dt == at::kFloat && K::float32_input) || dt == at::kBFloat16) && k.scalar_type() == dt &&
                  v.scalar_type() == dt && out.scalar_type() == dt && lse.scalar_type() == at::kFloat,
              name, ": q, k, v, out ", K::float32_input ? "float32 or bf16 (one dtype)" : "bf16", ", lse float32");
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1 && out.is_contiguous() && lse.is_contiguous(),
              name, ": rows must be contiguous");
  TORCH_CHECK(!mask.has_value() || (mask->scalar_type() == at::kByte && mask->dim() == 4),
              "mask must be a uint8 (B, H, Tq, Tk) view");
  TORCH_CHECK(diagonal_chunk > 0, "diagonal_chunk must be positive");
  const float c = static_cast<float>(p.q_scale), cap = static_cast<float>(p.softcap);
  if constexpr (K::float32_input) {
    if (dt == at::kFloat) {
      forward_rows<K, float>(q, k, v, mask, p.out, p.lse, p.b, p.h, p.q0, p.q1, p.band, c, p.block_k, diagonal_chunk,
                             cap);
      return;
    }
  }
  forward_rows<K, uint16_t>(q, k, v, mask, p.out, p.lse, p.b, p.h, p.q0, p.q1, p.band, c, p.block_k, diagonal_chunk,
                            cap);
}

}  // namespace
}  // namespace attnbench_forward
