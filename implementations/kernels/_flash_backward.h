// The backward work item of every tiled_fused kernel, written once over the kernel's type K (generic:
// _flash_backward.cpp on MKL's GEMMs; avx2: _flash_avx2_backward.cpp; avx512_bf16: _flash_bf16_backward.cpp),
// as _flash_forward.h is for the forward.
//
// An item is keys [k0, k1) of kv head hk of batch b (BackwardParams, _flash_items.h). For each query head of
// the group (GQA: K and V are read in place, never repeated) and each block of the rows that may see these
// keys (_flash_band.h: blocks wholly outside the band are never visited), the probability tile is recomputed
// from Q, K and the saved base-2 log-sum-exp:
//   S = Q K^T, dP = dO V^T;  P = 2^(c S - lse2), dS = P (dP - D) row by row;
//   dV_j += P^T dO_i,  dK_j += scale dS^T Q_i;  dQ_i += scale dS K_j.
// dK_j and dV_j belong to the item alone; dQ goes to a buffer private to the calling worker thread (the
// caller sums the workers' buffers): no atomics.
//
// What K supplies (the only thing the three kernels differ in): which inputs it takes (float32_input,
// bf16_input; contiguous_rows: whether it reads rows through raw pointers), row_step (query rows per call of
// probabilities_and_ds: 1, or 2 where a packed operand holds pairs of rows) and Item<T> (T: float, or the
// bits of bf16), constructed once per item (it packs K and V for its GEMMs, if it has its own), with
//   load_rows(h, q0, rows)             the block's Q and dO rows, in the layout its GEMMs read;
//   scores()                           S and dP;
//   probabilities_and_ds(row[, row2, second])   P and dS of one row (or of two: second false when row is
//                                      the block's last, odd row), in place of S and dP or into packed
//                                      operands;
//   gradients()                        dV += P^T dO, dK += dS^T Q (unscaled or scaled, its choice);
//   add_dq(h, q0)                      dq rows += scale dS K;
//   finish()                           dK, dV of the item written out (scaled by `scale` where it has not).
// In an anonymous namespace: each translation unit compiles its copy for the level of its own extension
// (_cpp_build.ISAS).
#pragma once

#include <torch/extension.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "_flash_band.h"
#include "_flash_items.h"
#include "_flash_pack.h"

namespace attnbench_backward {
namespace {

// What the skeleton derives from the parameters once per item.
struct Geometry {
  int64_t heads, group, tq, d, cols;  // query heads, heads per kv head, queries, head dim, keys of the item
  int64_t first, last;                // the rows [first, last) that may see these keys
  int64_t ms;                         // the mask's key stride (0: no mask)

  explicit Geometry(const attnbench_items::BackwardParams& p)
      : heads(p.q.size(1)),
        group(p.q.size(1) / p.k.size(1)),
        tq(p.q.size(2)),
        d(p.q.size(3)),
        cols(p.k1 - p.k0),
        first(p.band.first_row(p.qmin, p.k0)),
        last(p.band.last_row(p.qmax, p.k1)),
        ms(p.mask.has_value() ? p.mask->stride(3) : 0) {}
};

// One query row of a tile: its index r in the tile, its allowed keys [lo, lim) of the item's block (the band
// clipped), its mask row from k0 (nullptr: no mask), its base-2 log-sum-exp and D = rowsum(dO * O).
struct QueryRow {
  int64_t r, lo, lim;
  const uint8_t* mrow;
  float lse2, delta;
};

template <class K, typename T>
void backward_rows(const attnbench_items::BackwardParams& p) {
  const Geometry g(p);
  typename K::template Item<T> item(p, g);
  for (int64_t h = p.hk * g.group; h < (p.hk + 1) * g.group; ++h) {
    const float* lse_p = p.lse2.data_ptr<float>() + (p.b * g.heads + h) * g.tq;
    const float* delta_p = p.delta.data_ptr<float>() + (p.b * g.heads + h) * g.tq;
    for (int64_t q0 = g.first; q0 < g.last; q0 += p.block_q) {
      const int64_t rows = std::min(p.block_q, g.last - q0);
      item.load_rows(h, q0, rows);
      item.scores();
      const auto row = [&](int64_t r) {
        const int64_t i = q0 + r;
        QueryRow out{r, 0, 0, attnbench_pack::mask_row(p.mask, p.b, h, i, p.k0), lse_p[i], delta_p[i]};
        attnbench_band::clip(p.band, i, p.k0, g.cols, out.lo, out.lim);
        return out;
      };
      if constexpr (K::row_step == 1) {
        for (int64_t r = 0; r < rows; ++r) item.probabilities_and_ds(row(r));
      } else {
        static_assert(K::row_step == 2, "rows go one or two at a time");
        for (int64_t r = 0; r < rows; r += 2) {
          const bool second = r + 1 < rows;
          item.probabilities_and_ds(row(r), row(second ? r + 1 : r), second);
        }
      }
      item.gradients();
      item.add_dq(h, q0);
    }
  }
  item.finish();
}

// The work item, after checking its arguments: q, k, v, dout float32 (where K::float32_input) or bf16 (where
// K::bf16_input), one dtype, rows contiguous where K::contiguous_rows; lse2, delta, dq, dk, dv contiguous
// float32; mask, if any, a uint8 (B, H, Tq, Tk) view. `name` is the kernel's, for the messages.
template <class K>
void backward_item(const char* name, const attnbench_items::BackwardParams& p) {
  const auto dt = p.q.scalar_type();
  const bool takes = (dt == at::kFloat && K::float32_input) || (dt == at::kBFloat16 && K::bf16_input);
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&p.q, &p.k, &p.v, &p.dout}) {
    TORCH_CHECK(takes && t->scalar_type() == dt && (!K::contiguous_rows || t->stride(3) == 1), name, ": q, k, v, dout ",
                K::float32_input && K::bf16_input ? "float32 or bf16 (one dtype)" : K::bf16_input ? "bf16" : "float32",
                K::contiguous_rows ? " with contiguous rows" : "");
  }
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&p.lse2, &p.delta, &p.dq, &p.dk, &p.dv}) {
    TORCH_CHECK(t->scalar_type() == at::kFloat && t->is_contiguous(), name, ": lse2, delta, dq, dk, dv contiguous float32");
  }
  TORCH_CHECK(!p.mask.has_value() || (p.mask->scalar_type() == at::kByte && p.mask->dim() == 4),
              name, ": mask must be a uint8 (B, H, Tq, Tk) view");
  if constexpr (K::float32_input) {
    if (dt == at::kFloat) {
      backward_rows<K, float>(p);
      return;
    }
  }
  if constexpr (K::bf16_input) backward_rows<K, uint16_t>(p);
}

}  // namespace
}  // namespace attnbench_backward
