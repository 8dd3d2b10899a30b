#include "pattern.hpp"

#include <set>

namespace plexus::hybrid {
namespace {

std::string describe(std::string_view pattern, std::size_t position, const std::string& rule) {
  std::string message = rule + " (character " + std::to_string(position + 1) + ")\n  " +
                        std::string(pattern) + "\n  " + std::string(position, ' ') + "^";
  return message;
}

std::string quoted(char c) {
  return std::string("'") + c + "'";
}

// The main decoder: symbols, groups and pipeline separators.
void parse_main(std::string_view text, const SymbolRules& rules, Pattern& out) {
  bool in_group = false;
  std::size_t group_start = 0;     // position of the open '['
  std::vector<std::size_t> group;  // indices into out.layers of the open group
  uint32_t segment = 0;
  const auto close_group = [&](std::size_t position) {
    if (group.empty()) throw PatternError(out.text, group_start, "layer groups cannot be empty");
    for (std::size_t k = 0; k + 1 < group.size(); ++k) {
      const PatternLayer& layer = out.layers[group[k]];
      if (layer.symbol == rules.communicating)
        throw PatternError(
            out.text, layer.position,
            "MoE layer " + quoted(rules.communicating) + " must be the last symbol inside a layer group");
    }
    for (std::size_t a = 0; a < group.size(); ++a)
      for (std::size_t b = 0; b < a; ++b) {
        const PatternLayer& first = out.layers[group[b]];
        const PatternLayer& second = out.layers[group[a]];
        const std::string family = rules.key_family(second.symbol);
        if (family.empty() || family != rules.key_family(first.symbol)) continue;
        throw PatternError(out.text, second.position,
                           "layers " + quoted(first.symbol) + " (character " +
                               std::to_string(first.position + 1) + ") and " + quoted(second.symbol) +
                               " in one group would both write the checkpoint keys decoder.layers.N." +
                               family + ".*; a group holds at most one layer of each key family");
      }
    (void)position;
    ++out.logical_layers;
    group.clear();
    in_group = false;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '[') {
      if (in_group) throw PatternError(out.text, i, "nested layer groups are not supported");
      in_group = true;
      group_start = i;
      out.has_groups = true;
    } else if (c == ']') {
      if (!in_group) throw PatternError(out.text, i, "']' closes a layer group that was not opened");
      close_group(i);
    } else if (c == '|') {
      if (in_group)
        throw PatternError(
            out.text, i,
            "a pipeline segment separator '|' cannot split a layer group; put '|' around groups");
      ++segment;
    } else if (rules.is_layer(c)) {
      PatternLayer layer;
      layer.symbol = c;
      layer.position = i;
      layer.physical = out.main_layers++;
      layer.logical = out.logical_layers;  // a group's layers all get the index it closes with
      layer.segment = segment;
      layer.grouped = in_group;
      if (in_group)
        group.push_back(out.layers.size());
      else
        ++out.logical_layers;
      out.layers.push_back(layer);
    } else {
      throw PatternError(
          out.text, i,
          quoted(c) + " is not a valid layer symbol. Valid symbols are: " + rules.valid_symbols() +
              ", and '[' ']' (a group), '|' (pipeline segments), '/' (multi-token prediction)");
    }
  }
  if (in_group) throw PatternError(out.text, group_start, "'[' starts a layer group without a matching ']'");
  out.segments = segment + 1;
}

// One multi-token-prediction block: layers only (each block is one fused unit already).
std::vector<PatternLayer> parse_mtp(std::string_view text, std::size_t offset, uint32_t depth,
                                    const SymbolRules& rules, const std::string& full) {
  std::vector<PatternLayer> layers;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '|')
      throw PatternError(
          full, offset + i,
          "in a multi-token-prediction pattern, '|' is not a valid layer symbol (the MTP blocks "
          "sit on the last pipeline stage, after the main decoder's last segment)");
    if (c == '[' || c == ']')
      throw PatternError(
          full, offset + i,
          "layer groups are not allowed in a multi-token-prediction pattern (each depth is one unit)");
    if (!rules.is_layer(c))
      throw PatternError(
          full, offset + i,
          quoted(c) + " is not a valid layer symbol. Valid symbols are: " + rules.valid_symbols());
    PatternLayer layer;
    layer.symbol = c;
    layer.position = offset + i;
    layer.physical = static_cast<uint32_t>(i);
    layer.logical = 0;
    layer.mtp_depth = depth;
    layers.push_back(layer);
  }
  return layers;
}

}  // namespace

PatternError::PatternError(std::string_view pattern, std::size_t position, const std::string& rule)
    : std::invalid_argument(describe(pattern, position, rule)), position_(position), rule_(rule) {}

Pattern parse_pattern(std::string_view text, const SymbolRules& rules) {
  Pattern out;
  out.text = std::string(text);
  std::vector<std::pair<std::size_t, std::string_view>> parts;  // (offset, text) split on '/'
  std::size_t begin = 0;
  for (std::size_t i = 0; i <= text.size(); ++i)
    if (i == text.size() || text[i] == '/') {
      parts.emplace_back(begin, text.substr(begin, i - begin));
      begin = i + 1;
    }
  parse_main(parts.front().second, rules, out);
  if (out.main_layers == 0) throw PatternError(out.text, 0, "the pattern has no decoder layer");
  // Trailing empty parts ("M*/" or "M*//") mean no multi-token prediction, as in Megatron.
  while (parts.size() > 1 && parts.back().second.empty()) parts.pop_back();
  for (std::size_t d = 1; d < parts.size(); ++d) {
    const auto [offset, part] = parts[d];
    if (part.empty())
      throw PatternError(out.text, offset, "an empty multi-token-prediction pattern between '/'");
    if (part != parts[1].second)
      throw PatternError(out.text, offset,
                         "all multi-token-prediction patterns must be identical: \"" + std::string(part) +
                             "\" differs from \"" + std::string(parts[1].second) + "\"");
    auto layers = parse_mtp(part, offset, static_cast<uint32_t>(d), rules, out.text);
    out.layers.insert(out.layers.end(), layers.begin(), layers.end());
    out.mtp_layers_per_depth = static_cast<uint32_t>(layers.size());
  }
  out.mtp_depths = static_cast<uint32_t>(parts.size() - 1);
  return out;
}

std::string gpt_pattern(int64_t num_layers) {
  std::string text;
  for (int64_t i = 0; i < num_layers; ++i) text += "[*-]";
  return text;
}

std::string gpt_pattern(int64_t num_layers, int64_t moe_layer_freq) {
  if (moe_layer_freq <= 0) return gpt_pattern(num_layers);
  std::string text;
  for (int64_t i = 0; i < num_layers; ++i) text += i % moe_layer_freq == 0 ? "[*E]" : "[*-]";
  return text;
}

std::string gpt_mtp_parts(int64_t num_layers, int64_t moe_layer_freq, int64_t depths) {
  // The last decoder layer's symbols, ungrouped (an MTP part holds no brackets).
  const bool moe = moe_layer_freq > 0 && (num_layers - 1) % moe_layer_freq == 0;
  std::string text;
  for (int64_t d = 0; d < depths; ++d) text += moe ? "/*E" : "/*-";
  return text;
}

SegmentSelection select_segment(const Pattern& pattern, uint32_t pp_size, uint32_t pp_rank,
                                uint32_t vp_stage) {
  if (pp_size == 0 || pp_rank >= pp_size)
    throw std::invalid_argument("pipeline rank " + std::to_string(pp_rank) +
                                " is not below the pipeline size " + std::to_string(pp_size));
  if (pp_size > 1 && pattern.segments == 1)
    throw std::invalid_argument(
        "the pattern \"" + pattern.text + "\" has no '|': with a pipeline of " + std::to_string(pp_size) +
        " stages, mark where each stage's layers end with '|' (a group is never split)");
  if (pattern.segments % pp_size != 0)
    throw std::invalid_argument(
        "the pattern \"" + pattern.text + "\" has " + std::to_string(pattern.segments) +
        " pipeline segments, which do not divide by the pipeline size " + std::to_string(pp_size));
  SegmentSelection s;
  s.segment = vp_stage * pp_size + pp_rank;
  if (s.segment >= pattern.segments)
    throw std::invalid_argument("virtual pipeline stage " + std::to_string(vp_stage) + " of pipeline rank " +
                                std::to_string(pp_rank) + " selects segment " + std::to_string(s.segment) +
                                ", but the pattern has " + std::to_string(pattern.segments));
  std::set<uint32_t> earlier_logical;
  std::size_t i = 0;
  for (;
       i < pattern.layers.size() && pattern.layers[i].mtp_depth == 0 && pattern.layers[i].segment < s.segment;
       ++i) {
    ++s.physical_offset;
    earlier_logical.insert(pattern.layers[i].logical);
  }
  s.logical_offset = static_cast<uint32_t>(earlier_logical.size());
  s.first = i;
  while (i < pattern.layers.size() && pattern.layers[i].mtp_depth == 0 &&
         pattern.layers[i].segment == s.segment)
    ++i;
  s.end = i;
  return s;
}

}  // namespace plexus::hybrid
