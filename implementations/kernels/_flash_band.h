// The keys each query row of tiled_fused may see, as one contiguous range [lo(i), hi(i)): causal masking
// in either alignment, a sliding window and packed sequences all reduce to it (a boolean mask, if any,
// is applied on top). Rows and keys are absolute indices into the (B, H, T, d) tensors; a packed
// sequence passes its own key range [kmin, kmax) and the shift that aligns its rows with its keys:
// row i sees key j when j <= i + shift (causal) and i + shift - left <= j <= i + shift + right (window;
// a negative left or right is unbounded). Both ends grow with i, so the keys a block of rows may see
// are [lo(first row), hi(last row)), and a key block is visited only when that range meets it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace attnbench_band {

struct Band {
  bool causal;
  int64_t kmin, kmax, shift, left, right;

  // {causal, kmin, kmax, shift, left, right}, as the Python side passes it.
  explicit Band(const std::vector<int64_t>& b)
      : causal(b.at(0) != 0), kmin(b.at(1)), kmax(b.at(2)), shift(b.at(3)), left(b.at(4)), right(b.at(5)) {}

  int64_t lo(int64_t i) const { return left < 0 ? kmin : std::max(kmin, i + shift - left); }

  int64_t hi(int64_t i) const {
    int64_t h = kmax;
    if (causal) h = std::min(h, i + shift + 1);
    if (right >= 0) h = std::min(h, i + shift + right + 1);
    return h;
  }

  // Rows [first, last) of [qmin, qmax) that may see some key of [k0, k1) (first >= last: none).
  int64_t first_row(int64_t qmin, int64_t k0) const {
    int64_t r = qmin;
    if (causal) r = std::max(r, k0 - shift);
    if (right >= 0) r = std::max(r, k0 - shift - right);
    return r;
  }
  int64_t last_row(int64_t qmax, int64_t k1) const { return left < 0 ? qmax : std::min(qmax, k1 - shift + left); }
};

// Row i's allowed keys within a tile starting at key t0 with n columns: [a, b) with 0 <= a <= b <= n.
inline void clip(const Band& band, int64_t i, int64_t t0, int64_t n, int64_t& a, int64_t& b) {
  a = std::min(n, std::max<int64_t>(0, band.lo(i) - t0));
  b = std::min(n, std::max<int64_t>(0, band.hi(i) - t0));
  if (b < a) b = a;
}

}  // namespace attnbench_band
