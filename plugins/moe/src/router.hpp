// The router: logits = u Wr^T over the experts, the top-k choice per token, the probabilities
// that weight the chosen experts' outputs, and the two auxiliary losses (load balancing and z).
// Everything per token, in the activations' precision T (float or double).
//
// Score functions (Megatron-LM's topk_routing_with_score_function):
//   softmax (default)  p = softmax over the k selected logits
//   softmax, pre       s = softmax over all E logits, p = s at the k selected experts
//   sigmoid            s = sigmoid(logits), p = s at the selected, / their sum when k > 1
// The selection is the k largest logits in every case (all three scores are monotonic in the
// logit), ties going to the lower expert index. With the aux-loss-free expert bias b (a buffer
// the layer updates after each step, expert_bias.hpp) the selection is the k largest of
// score_i + b_i instead (score: the logit for softmax after the top-k, the softmax over all E
// before it, the sigmoid), and b enters nothing else: the probabilities p that weight the
// chosen experts' outputs are those of the unbiased scores at the chosen experts. With group-limited routing
// (Megatron's group_limited_topk) the experts form G equal groups, each scored by the sum of its k / g
// largest selection scores (the logits for softmax after the top-k, else the softmax or sigmoid
// scores); a token chooses among the experts of its g best groups only.
//
// Auxiliary losses, on the scores over all experts (softmax, or the sigmoid normalized over all
// E when k > 1) and the counts of a plain top-k of those scores (not differentiated; without
// groups, the routed counts):
//   aux = E coeff / (k T^2) sum_i (sum_t s_ti) count_i
//   z   = coeff / T sum_t logsumexp(logits_t)^2
// Their gradients enter the router's backward multiplied by the loss scale (d objective / d
// this microbatch's loss), so they are weighted like the main loss.
#pragma once

#include <cstdint>
#include <vector>

#include "config.hpp"
#include "plexus/cpp/group.hpp"
#include "plexus_kernels/buffer.hpp"

namespace plexus::moe {

// One microbatch's routing, kept from forward for backward.
struct RouterSaved {
  int64_t tokens = 0;
  plexus::kernels::Buffer logits;   // [T, E]
  plexus::kernels::Buffer scores;   // [T, E]: the aux-loss scores (softmax over E, or normalized sigmoid)
  plexus::kernels::Buffer probs;    // [T, k]
  plexus::kernels::Buffer lse;      // [T]: logsumexp of the logits (z-loss)
  std::vector<int32_t> chosen;      // [T, k]: expert ids, largest (biased) selection score first
  std::vector<int64_t> counts;      // [E]: tokens routed to each expert
  std::vector<int64_t> aux_counts;  // [E]: the aux loss's counts (a top-k without groups)
  // The tokens the auxiliary losses average over: the microbatch's; under sequence parallelism
  // every tp rank's (aux_counts are then summed over tp too), so each rank's losses are its
  // tokens' parts of the whole microbatch's (Megatron reduces the counts over tp x cp).
  int64_t loss_tokens = 0;
  double aux_loss = 0, z_loss = 0;
};

// logits = u Wr^T, the choice, the probabilities, the counts and the auxiliary losses. bias [E]:
// the expert bias added to the selection scores, or null (none). `sequence`: under sequence
// parallelism the tp group whose ranks hold the microbatch's other tokens (one rank: none).
template <class T>
void router_forward(const MoeConfig& c, int64_t tokens, const T* u, const T* w_router, const T* bias,
                    RouterSaved& s, const plexus::sdk::Group& sequence);

// dlogits [T, E] (written) from dprobs [T, k] and the auxiliary losses' gradients scaled by
// loss_scale.
template <class T>
void router_backward(const MoeConfig& c, const RouterSaved& s, const T* dprobs, double loss_scale,
                     T* dlogits);

}  // namespace plexus::moe
