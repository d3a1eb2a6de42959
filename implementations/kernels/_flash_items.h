// The entry points of tiled_fused's kernels, one work item per call, as implementations/_fused_kernels.py
// calls them (bound in _flash_fused.cpp and _flash_bf16.cpp, the two extensions).
#pragma once

#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <tuple>
#include <vector>

// A forward item: query rows [q0, q1) of head h of batch b; writes those rows of out (B, H, Tq, d) and of
// lse (B, H, Tq; natural log, -inf for rows no key reaches). band_spec: one packed sequence's band
// (_flash_band.h); q_scale: the softmax scale times log2(e) (scores are in base 2).
#define ATTNBENCH_FORWARD_ITEM(name)                                                                             \
  void name(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const c10::optional<at::Tensor>& mask, \
            at::Tensor out, at::Tensor lse, int64_t b, int64_t h, int64_t q0, int64_t q1,                        \
            const std::vector<int64_t>& band_spec, double q_scale, int64_t block_k, int64_t diagonal_chunk)

// A backward item: keys [k0, k1) of kv head hk of batch b against the rows [qmin, qmax) of their sequence
// that see them; writes dK, dV of those keys and adds into dq (the calling worker's own buffer). lse2:
// base-2 log-sum-exp; delta: rowsum(dO * O); c: scale * log2(e).
#define ATTNBENCH_BACKWARD_ITEM(name)                                                                            \
  void name(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,                \
            const at::Tensor& lse2, const at::Tensor& delta, const c10::optional<at::Tensor>& mask, at::Tensor dq, \
            at::Tensor dk, at::Tensor dv, int64_t b, int64_t hk, int64_t k0, int64_t k1, int64_t qmin, int64_t qmax, \
            const std::vector<int64_t>& band_spec, double c, double scale, int64_t block_q)

// Forward items (b, h, q0, q1, band_spec), longest first, for the batch entry points below.
using ForwardItems = std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, std::vector<int64_t>>>;

// Every item of a forward with one entry point: `name` runs `item` on each, on torch's own threads
// (at::parallel_for, in a build with -fopenmp: the OpenMP team torch's other operations use). A thread pool
// of our own would compete for the cores with that team's threads, which spin for a while after each
// torch operation. Each thread takes the next item until none is left, so the threads finish together.
#define ATTNBENCH_FORWARD_ITEMS(name, item)                                                                      \
  void name(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const c10::optional<at::Tensor>& mask, \
            at::Tensor out, at::Tensor lse, const ForwardItems& items, double q_scale, int64_t block_k,           \
            int64_t diagonal_chunk) {                                                                            \
    const int64_t n = static_cast<int64_t>(items.size());                                                       \
    std::atomic<int64_t> next{0};                                                                                \
    at::parallel_for(0, std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), n)), 1, [&](int64_t, int64_t) { \
      at::NoGradGuard raw_kernels; /* grad mode is per thread: these are raw kernels, never recorded */          \
      for (int64_t i = next++; i < n; i = next++) {                                                              \
        const auto& [b, h, q0, q1, band] = items[i];                                                             \
        item(q, k, v, mask, out, lse, b, h, q0, q1, band, q_scale, block_k, diagonal_chunk);                     \
      }                                                                                                          \
    });                                                                                                          \
  }

// Binds work item `name` with the GIL released while it runs (the workers run items in parallel).
#define ATTNBENCH_DEF_ITEM(module, name, doc) \
  module.def(#name, &name, doc, pybind11::call_guard<pybind11::gil_scoped_release>())

bool has_avx2_fma();    // _flash_avx2.cpp: this build (-mavx2 -mfma) and this CPU run the avx2 kernels
bool has_avx512f();     // _flash_f32.cpp
bool has_avx512bf16();  // _flash_bf16.cpp
ATTNBENCH_FORWARD_ITEM(forward_item_avx2);  // _flash_avx2.cpp
ATTNBENCH_FORWARD_ITEM(forward_item_f32);   // _flash_f32.cpp
ATTNBENCH_FORWARD_ITEM(forward_item_bf16);  // _flash_bf16.cpp
ATTNBENCH_BACKWARD_ITEM(backward_item);       // _flash_backward.cpp (MKL's GEMMs)
ATTNBENCH_BACKWARD_ITEM(backward_item_avx2);  // _flash_avx2_backward.cpp
ATTNBENCH_BACKWARD_ITEM(backward_item_bf16);  // _flash_bf16_backward.cpp
