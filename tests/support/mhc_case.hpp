// One test case of the "mhc" family's primitives (sizes, Sinkhorn settings, how the res logits
// are drawn), shared by the parity tests of the mHC backends.
#pragma once

#include <boost/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "plexus/mhc.h"

namespace plexus::test {

// How the res logits are drawn: ordinary; large (|h_res| ~ 1e3, one column per row far above the
// others: no overflow); tiny_sums (one column far below: its sum is clamped to eps); spread and
// column_dominated (with eps = 0.5: clamps carrying real mass).
enum class MhcLogits { ordinary, large, tiny_sums, spread, column_dominated };

struct MhcCase {
  std::string name;
  int64_t n = 4, C = 37, T = 5;
  int32_t K = 20;
  double eps = 1e-6;
  bool transposed = false;
  bool bias = true;
  MhcLogits logits = MhcLogits::ordinary;

  int64_t W() const { return n * n + 2 * n; }
  plx_mhc_problem problem() const {
    plx_mhc_problem p{};
    p.struct_size = sizeof(p);
    p.flags = transposed ? PLX_MHC_TRANSPOSED_H_RES : 0u;
    p.num_streams = n;
    p.hidden_size = C;
    p.num_tokens = T;
    p.sinkhorn_iterations = K;
    p.eps = eps;
    return p;
  }
  // The case as tests/reference/mhc_reference.py reads it from spec.json.
  boost::json::object json() const {
    return {{"name", name}, {"n", n}, {"C", C}, {"T", T}, {"K", K}, {"eps", eps}, {"transposed", transposed},
            {"bias", bias}};
  }
};

// The cases every backend's parity test covers, with `tokens` tokens each: n in {1, 2, 4, 8} with
// ordinary, large and tiny-sum logits (n = 1 only ordinary: a 1 x 1 H_res is 1 whatever the
// logit); eps = 0.5 with K = 3 where clamps carry real mass; the transposed switch; no bias.
inline std::vector<MhcCase> standard_mhc_cases(int64_t tokens) {
  std::vector<MhcCase> all;
  const auto add = [&](MhcCase c) {
    c.T = tokens;
    all.push_back(std::move(c));
  };
  for (int64_t n : {1, 2, 4, 8})
    for (MhcLogits logits : {MhcLogits::ordinary, MhcLogits::large, MhcLogits::tiny_sums}) {
      if (n == 1 && logits != MhcLogits::ordinary) continue;
      MhcCase c;
      c.n = n;
      c.logits = logits;
      c.name = 'n' + std::to_string(n) +
               (logits == MhcLogits::ordinary ? "_ordinary"
                : logits == MhcLogits::large  ? "_large"
                                              : "_tiny_sums");
      add(c);
    }
  for (MhcLogits logits : {MhcLogits::spread, MhcLogits::column_dominated}) {
    MhcCase c;
    c.name = logits == MhcLogits::spread ? "n4_eps0.5_spread" : "n4_eps0.5_column_dominated";
    c.eps = 0.5;
    c.K = 3;
    c.logits = logits;
    add(c);
  }
  MhcCase transposed;
  transposed.name = "n4_transposed";
  transposed.transposed = true;
  add(transposed);
  MhcCase no_bias;
  no_bias.name = "n2_no_bias";
  no_bias.n = 2;
  no_bias.bias = false;
  add(no_bias);
  return all;
}

}  // namespace plexus::test
