// Megatron-LM's hybrid layer pattern grammar (hybrid_layer_allocation.py, with the bracket groups
// of its grouped HybridStack): one symbol per layer, '[' ']' around layers that form one logical
// layer, '|' between pipeline segments, '/' before each multi-token-prediction block.
// Plain C++ with no SDK types, so the grammar is unit-tested on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace plexus::hybrid {

// A pattern that breaks a rule. what() is the whole message: the rule, the 1-based character
// position, and the pattern with a caret under it.
class PatternError : public std::invalid_argument {
 public:
  PatternError(std::string_view pattern, std::size_t position, const std::string& rule);
  std::size_t position() const { return position_; }  // 0-based index into the pattern
  const std::string& rule() const { return rule_; }

 private:
  std::size_t position_;
  std::string rule_;
};

// What the grammar needs to know of a symbol: whether it is one, and which family of checkpoint
// keys its layer writes under decoder.layers.N. (two layers of one family in a group would write
// the same keys under the group's one index).
struct SymbolRules {
  std::function<bool(char)> is_layer;
  std::function<std::string(char)> key_family;
  std::function<std::string()> valid_symbols;  // for the unknown-symbol message: "'*', '-', 'E', 'M'"
  char communicating = 'E';                    // a layer that may only end a group (MoE: its all-to-alls)
};

struct PatternLayer {
  char symbol = 0;
  std::size_t position = 0;  // 0-based index of the symbol in the pattern text
  uint32_t physical = 0;     // 0-based over the main decoder; within its block for MTP layers
  uint32_t logical = 0;      // 0-based; a group's layers share it
  uint32_t segment = 0;      // pipeline segment of the main decoder (0 for MTP layers)
  uint32_t mtp_depth = 0;    // 0: main decoder; d >= 1: the d-th MTP block
  bool grouped = false;      // inside [ ]
};

struct Pattern {
  std::string text;
  std::vector<PatternLayer> layers;  // main decoder in order, then MTP block 1, 2, ...
  uint32_t main_layers = 0;          // physical layers of the main decoder
  uint32_t logical_layers = 0;       // logical layers of the main decoder
  uint32_t segments = 1;             // pipeline segments of the main decoder
  uint32_t mtp_depths = 0;           // MTP blocks
  uint32_t mtp_layers_per_depth = 0;
  bool has_groups = false;
};

Pattern parse_pattern(std::string_view text, const SymbolRules& rules);

// The GPT as a pattern: "[*-]" num_layers times.
std::string gpt_pattern(int64_t num_layers);
// The GPT with MoE layers (Megatron-LM's moe_layer_freq k): layer i's MLP is an MoE layer, "[*E]",
// when i % k == 0; k == 0 is the dense GPT.
std::string gpt_pattern(int64_t num_layers, int64_t moe_layer_freq);
// The GPT's MTP blocks as pattern parts: "/*-" (or "/*E" when the last decoder layer is MoE) per
// depth, Megatron's rule that an MTP block's layer has the last decoder layer's spec.
std::string gpt_mtp_parts(int64_t num_layers, int64_t moe_layer_freq, int64_t depths);

// Megatron's pipeline segment selection: the segment of (pp_rank, vp_stage) is
// vp_stage * pp_size + pp_rank; the segment count must divide by pp_size (as many segments per
// rank). A group is never split, since '|' cannot stand inside one.
struct SegmentSelection {
  uint32_t segment = 0;
  std::size_t first = 0, end = 0;  // layers [first, end) of Pattern::layers (main decoder only)
  uint32_t physical_offset = 0;    // physical layers in all earlier segments
  uint32_t logical_offset = 0;     // logical layers in all earlier segments
};
SegmentSelection select_segment(const Pattern& pattern, uint32_t pp_size, uint32_t pp_rank,
                                uint32_t vp_stage);

}  // namespace plexus::hybrid
