// The entry points of tiled_fused's kernels, as implementations/_fused_kernels.py calls them: one parameter
// struct per kind of work item (as FlashAttention's Flash_fwd_params), filled once by the binding from the
// Python arguments; every kernel is a function of that struct alone, so adding a kernel adds no signature.
#pragma once

#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <tuple>
#include <vector>

#include "_flash_band.h"

namespace attnbench_items {

// A forward item: query rows [q0, q1) of head h of batch b, whose row i may see the keys of `band`; writes
// those rows of out (B, H, Tq, d) and of lse (B, H, Tq; natural log, -inf for rows no key reaches).
struct ForwardParams {
  const at::Tensor& q;
  const at::Tensor& k;
  const at::Tensor& v;
  const c10::optional<at::Tensor>& mask;  // uint8 (B, H, Tq, Tk) view, or none
  at::Tensor& out;
  at::Tensor& lse;
  int64_t b, h, q0, q1;
  attnbench_band::Band band;  // one packed sequence's keys (_flash_band.h)
  double q_scale;             // the softmax scale times log2(e): scores are in base 2
  int64_t block_k;            // keys per packed block
  int64_t diagonal_chunk;     // rows per GEMM where a block crosses an edge of the band
  double softcap;             // logits become softcap * tanh(logit / softcap) before any mask (0: none)
};

// A backward item: keys [k0, k1) of kv head hk of batch b against the rows [qmin, qmax) of their sequence
// that see them; writes dK, dV of those keys and adds into dq (the calling worker's own buffer).
struct BackwardParams {
  const at::Tensor& q;
  const at::Tensor& k;
  const at::Tensor& v;
  const at::Tensor& dout;
  const at::Tensor& lse2;   // base-2 log-sum-exp (+inf for rows no key reaches: P = 0)
  const at::Tensor& delta;  // rowsum(dO * O)
  const c10::optional<at::Tensor>& mask;
  at::Tensor& dq;
  at::Tensor& dk;
  at::Tensor& dv;
  int64_t b, hk, k0, k1, qmin, qmax;
  attnbench_band::Band band;
  float c;      // scale * log2(e)
  float scale;  // the softmax scale (dK, dQ)
  int64_t block_q;
};

using ForwardKernel = void (*)(const ForwardParams&);
using BackwardKernel = void (*)(const BackwardParams&);

// Forward items (b, h, q0, q1, band_spec), longest first, for forward_items.
using ForwardItems = std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, std::vector<int64_t>>>;

// The binding of one forward item (the Python workers call it, one item per call).
template <ForwardKernel kernel>
void forward_item(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const c10::optional<at::Tensor>& mask,
                  at::Tensor out, at::Tensor lse, int64_t b, int64_t h, int64_t q0, int64_t q1,
                  const std::vector<int64_t>& band, double q_scale, int64_t block_k, int64_t diagonal_chunk,
                  double softcap) {
  kernel(ForwardParams{q, k, v, mask, out, lse, b, h, q0, q1, attnbench_band::Band(band), q_scale, block_k,
                       diagonal_chunk, softcap});
}

// Every item of a forward in one call, on torch's own threads (at::parallel_for, in a build with -fopenmp:
// the OpenMP team torch's other operations use). A thread pool of our own would compete for the cores with
// that team's threads, which spin for a while after each torch operation. Each thread takes the next item
// until none is left, so the threads finish together.
template <ForwardKernel kernel>
void forward_items(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const c10::optional<at::Tensor>& mask, at::Tensor out, at::Tensor lse, const ForwardItems& items,
                   double q_scale, int64_t block_k, int64_t diagonal_chunk, double softcap) {
  const int64_t n = static_cast<int64_t>(items.size());
  std::atomic<int64_t> next{0};
  at::parallel_for(0, std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), n)), 1, [&](int64_t, int64_t) {
    at::NoGradGuard raw_kernels;  // grad mode is per thread: these are raw kernels, never recorded
    for (int64_t i = next++; i < n; i = next++) {
      const auto& [b, h, q0, q1, band] = items[i];
      kernel(ForwardParams{q, k, v, mask, out, lse, b, h, q0, q1, attnbench_band::Band(band), q_scale, block_k,
                           diagonal_chunk, softcap});
    }
  });
}

// The binding of one backward item.
template <BackwardKernel kernel>
void backward_item(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
                   const at::Tensor& lse2, const at::Tensor& delta, const c10::optional<at::Tensor>& mask,
                   at::Tensor dq, at::Tensor dk, at::Tensor dv, int64_t b, int64_t hk, int64_t k0, int64_t k1,
                   int64_t qmin, int64_t qmax, const std::vector<int64_t>& band, double c, double scale,
                   int64_t block_q) {
  kernel(BackwardParams{q, k, v, dout, lse2, delta, mask, dq, dk, dv, b, hk, k0, k1, qmin, qmax,
                        attnbench_band::Band(band), static_cast<float>(c), static_cast<float>(scale), block_q});
}

// Binds `fn` as `name` with the GIL released while it runs (the workers run items in parallel).
template <typename F>
void def_item(pybind11::module_& module, const char* name, F fn, const char* doc) {
  module.def(name, fn, doc, pybind11::call_guard<pybind11::gil_scoped_release>());
}

}  // namespace attnbench_items

// The kernels, one per tier and kind (their translation units say how each computes).
void forward_generic(const attnbench_items::ForwardParams& p);     // _flash_fused.cpp (MKL's GEMMs)
void forward_avx2(const attnbench_items::ForwardParams& p);        // _flash_avx2.cpp
void forward_f32(const attnbench_items::ForwardParams& p);         // _flash_f32.cpp (AVX-512F)
void forward_bf16(const attnbench_items::ForwardParams& p);        // _flash_bf16.cpp (AVX512_BF16)
void backward_generic(const attnbench_items::BackwardParams& p);   // _flash_backward.cpp (MKL's GEMMs)
void backward_avx2(const attnbench_items::BackwardParams& p);      // _flash_avx2_backward.cpp
void backward_bf16(const attnbench_items::BackwardParams& p);      // _flash_bf16_backward.cpp
void backward_amx(const attnbench_items::BackwardParams& p);       // _flash_bf16_backward.cpp (oneDNN's brgemm)
