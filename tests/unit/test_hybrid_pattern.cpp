#define BOOST_TEST_MODULE hybrid_pattern
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>

#include <string>

#include "pattern.hpp"
#include "stack.hpp"
#include "symbols.hpp"

namespace hy = plexus::hybrid;

namespace {

// The built-in symbols, as the stack plugin sees them for a model section without overrides.
const hy::SymbolTable& builtin() {
  static const hy::SymbolTable table(boost::json::parse(R"({"num_layers": 4})"), boost::json::value());
  return table;
}

hy::SymbolRules rules(const hy::SymbolTable& table = builtin()) {
  hy::SymbolRules r;
  r.is_layer = [&table](char c) { return table.contains(c); };
  r.key_family = [&table](char c) { return table.at(c).family; };
  r.valid_symbols = [&table] { return table.valid_symbols(); };
  return r;
}

hy::Pattern parse(const std::string& text) {
  return hy::parse_pattern(text, rules());
}

// The error a pattern gets: its rule and the 0-based position of the character it names.
struct Refusal {
  std::string rule;
  std::size_t position = 0;
  std::string message;
};
Refusal refusal(const std::string& text) {
  try {
    (void)parse(text);
  } catch (const hy::PatternError& e) {
    return {e.rule(), e.position(), e.what()};
  }
  BOOST_FAIL("the pattern \"" + text + "\" was accepted");
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

// Megatron's own example: "M[M*]-" is three logical and four physical layers; Megatron numbers the
// physical ones 1..4 (layer_number), Plexus 0..3, and the group's two layers share logical index 1.
BOOST_AUTO_TEST_CASE(megatron_example_numbering) {
  const hy::Pattern p = parse("M[M*]-");
  BOOST_TEST(p.main_layers == 4u);
  BOOST_TEST(p.logical_layers == 3u);
  BOOST_TEST(p.has_groups);
  BOOST_TEST_REQUIRE(p.layers.size() == 4u);
  const char symbols[] = {'M', 'M', '*', '-'};
  const uint32_t logical[] = {0, 1, 1, 2};
  const bool grouped[] = {false, true, true, false};
  for (uint32_t i = 0; i < 4; ++i) {
    BOOST_TEST(p.layers[i].symbol == symbols[i]);
    BOOST_TEST(p.layers[i].physical == i);
    BOOST_TEST(p.layers[i].logical == logical[i]);
    BOOST_TEST(p.layers[i].grouped == grouped[i]);
  }
}

BOOST_AUTO_TEST_CASE(ungrouped_layers_are_their_own_logical_layers) {
  const hy::Pattern p = parse("M*M-");
  BOOST_TEST(p.main_layers == 4u);
  BOOST_TEST(p.logical_layers == 4u);
  for (uint32_t i = 0; i < 4; ++i) BOOST_TEST(p.layers[i].logical == i);
  BOOST_TEST(!p.has_groups);
  BOOST_TEST(p.segments == 1u);
  BOOST_TEST(p.mtp_depths == 0u);
}

BOOST_AUTO_TEST_CASE(the_gpt_is_attention_and_mlp_groups) {
  BOOST_TEST(hy::gpt_pattern(3) == "[*-][*-][*-]");
  const hy::Pattern p = parse(hy::gpt_pattern(3));
  BOOST_TEST(p.main_layers == 6u);
  BOOST_TEST(p.logical_layers == 3u);
  for (uint32_t i = 0; i < 6; ++i) BOOST_TEST(p.layers[i].logical == i / 2);
}

// Megatron's moe_layer_freq k: layer i's MLP is an MoE when i % k == 0; 0 is the dense GPT.
BOOST_AUTO_TEST_CASE(the_gpt_with_every_kth_mlp_an_moe) {
  BOOST_TEST(hy::gpt_pattern(4, 2) == "[*E][*-][*E][*-]");
  BOOST_TEST(hy::gpt_pattern(3, 1) == "[*E][*E][*E]");
  BOOST_TEST(hy::gpt_pattern(5, 3) == "[*E][*-][*-][*E][*-]");
  BOOST_TEST(hy::gpt_pattern(2, 0) == hy::gpt_pattern(2));
  BOOST_TEST(parse(hy::gpt_pattern(4, 2)).logical_layers == 4u);
}

// Megatron's GPT MTP block: one layer with the last decoder layer's spec, per depth.
BOOST_AUTO_TEST_CASE(the_gpt_mtp_blocks_copy_the_last_layer) {
  BOOST_TEST(hy::gpt_mtp_parts(3, 0, 2) == "/*-/*-");
  BOOST_TEST(hy::gpt_mtp_parts(4, 2, 1) == "/*-");  // layer 3 is dense
  BOOST_TEST(hy::gpt_mtp_parts(5, 2, 1) == "/*E");  // layer 4 is an MoE layer
  BOOST_TEST(hy::gpt_mtp_parts(3, 1, 0).empty());
  const hy::Pattern p = parse(hy::gpt_pattern(4, 2) + hy::gpt_mtp_parts(4, 2, 2));
  BOOST_TEST(p.main_layers == 8u);
  BOOST_TEST(p.mtp_depths == 2u);
  BOOST_TEST(p.mtp_layers_per_depth == 2u);
}

// Megatron's example: "[*-][*-]|[*E][*E]" at virtual stage 1 of a 1-stage pipeline is the second
// segment, [*E][*E], with physical offset 4 and logical offset 2.
BOOST_AUTO_TEST_CASE(pipeline_segment_offsets) {
  const hy::Pattern p = parse("[*-][*-]|[*E][*E]");
  BOOST_TEST(p.segments == 2u);
  const hy::SegmentSelection s = hy::select_segment(p, 1, 0, 1);
  BOOST_TEST(s.segment == 1u);
  BOOST_TEST(s.physical_offset == 4u);
  BOOST_TEST(s.logical_offset == 2u);
  BOOST_TEST_REQUIRE(s.end - s.first == 4u);
  BOOST_TEST(p.layers[s.first].symbol == '*');
  BOOST_TEST(p.layers[s.first + 1].symbol == 'E');
  BOOST_TEST(p.layers[s.first].logical == 2u);
  // Two pipeline ranks: rank r takes segment r at virtual stage 0.
  const hy::SegmentSelection r1 = hy::select_segment(p, 2, 1, 0);
  BOOST_TEST(r1.segment == 1u);
  BOOST_TEST(r1.physical_offset == 4u);
  const hy::SegmentSelection r0 = hy::select_segment(p, 2, 0, 0);
  BOOST_TEST(r0.first == 0u);
  BOOST_TEST(r0.end == 4u);
}

// vp_stage * pp_size + pp_rank, over four segments on two ranks with two virtual stages each.
BOOST_AUTO_TEST_CASE(virtual_pipeline_segment_order) {
  const hy::Pattern p = parse("M|*|-|M*");
  BOOST_TEST(p.segments == 4u);
  BOOST_TEST(hy::select_segment(p, 2, 0, 0).segment == 0u);
  BOOST_TEST(hy::select_segment(p, 2, 1, 0).segment == 1u);
  BOOST_TEST(hy::select_segment(p, 2, 0, 1).segment == 2u);
  const hy::SegmentSelection last = hy::select_segment(p, 2, 1, 1);
  BOOST_TEST(last.segment == 3u);
  BOOST_TEST(last.physical_offset == 3u);
  BOOST_TEST(last.end - last.first == 2u);
}

BOOST_AUTO_TEST_CASE(empty_segments_are_allowed) {
  const hy::Pattern p = parse("M*||-");
  BOOST_TEST(p.segments == 3u);
  const hy::SegmentSelection s = hy::select_segment(p, 3, 1, 0);
  BOOST_TEST(s.end == s.first);
  BOOST_TEST(s.physical_offset == 2u);
}

BOOST_AUTO_TEST_CASE(segment_selection_refusals) {
  const hy::Pattern three = parse("M|*|-");
  BOOST_CHECK_EXCEPTION(hy::select_segment(three, 2, 0, 0), std::invalid_argument, [](const auto& e) {
    return contains(e.what(), "3 pipeline segments, which do not divide by the pipeline size 2");
  });
  BOOST_CHECK_EXCEPTION(hy::select_segment(three, 3, 0, 1), std::invalid_argument,
                        [](const auto& e) { return contains(e.what(), "selects segment 3"); });
  const hy::Pattern flat = parse("M*M-");
  BOOST_CHECK_EXCEPTION(hy::select_segment(flat, 2, 0, 0), std::invalid_argument,
                        [](const auto& e) { return contains(e.what(), "has no '|'"); });
  BOOST_CHECK_EXCEPTION(hy::select_segment(flat, 2, 2, 0), std::invalid_argument,
                        [](const auto& e) { return contains(e.what(), "not below the pipeline size"); });
}

BOOST_AUTO_TEST_CASE(multi_token_prediction_parts) {
  const hy::Pattern p = parse("M*M-/*-/*-");
  BOOST_TEST(p.main_layers == 4u);
  BOOST_TEST(p.mtp_depths == 2u);
  BOOST_TEST(p.mtp_layers_per_depth == 2u);
  BOOST_TEST_REQUIRE(p.layers.size() == 8u);
  BOOST_TEST(p.layers[4].mtp_depth == 1u);
  BOOST_TEST(p.layers[7].mtp_depth == 2u);
  BOOST_TEST(p.layers[7].symbol == '-');
  // Trailing empty parts mean no MTP, as in Megatron.
  BOOST_TEST(parse("M*/").mtp_depths == 0u);
  BOOST_TEST(parse("M*//").mtp_depths == 0u);
}

// Every rule with Megatron's message fragment and the character it points at.
BOOST_AUTO_TEST_CASE(grammar_errors_name_the_rule_and_position) {
  struct Case {
    const char* pattern;
    const char* rule;
    std::size_t position;
  };
  const Case cases[] = {
      {"M[M*", "'[' starts a layer group without a matching ']'", 1},
      {"M[]", "layer groups cannot be empty", 1},
      {"M[M[*]]", "nested layer groups are not supported", 3},
      {"M[[M]]", "nested layer groups are not supported", 2},
      {"M]", "']' closes a layer group that was not opened", 1},
      {"M[EM]", "MoE layer 'E' must be the last symbol inside a layer group", 2},
      {"[EE]", "MoE layer 'E' must be the last symbol inside a layer group", 1},
      {"[**]", "a group holds at most one layer of each key family", 2},
      {"[MM]", "a group holds at most one layer of each key family", 2},
      {"[*-*]", "a group holds at most one layer of each key family", 3},
      {"[-E]", "a group holds at most one layer of each key family", 2},
      {"M[M|*]", "cannot split a layer group", 3},
      {"M*X-", "'X' is not a valid layer symbol", 2},
      {"M* -", "' ' is not a valid layer symbol", 2},
      {"M*/*|-", "'|' is not a valid layer symbol", 4},
      {"M*/[*-]", "layer groups are not allowed in a multi-token-prediction pattern", 3},
      {"M*/*-/-*", "all multi-token-prediction patterns must be identical", 6},
      {"M*/*-//*-", "an empty multi-token-prediction pattern", 6},
      {"", "the pattern has no decoder layer", 0},
      {"|", "the pattern has no decoder layer", 0},
      {"[]", "layer groups cannot be empty", 0},
  };
  for (const Case& c : cases) {
    const Refusal r = refusal(c.pattern);
    BOOST_TEST(contains(r.rule, c.rule), c.pattern << ": " << r.message);
    BOOST_TEST(r.position == c.position, c.pattern << ": " << r.message);
    // The message shows the pattern and a caret under the character.
    BOOST_TEST(contains(r.message, "(character " + std::to_string(c.position + 1) + ")"), r.message);
    BOOST_TEST(contains(r.message, "\n  " + std::string(c.position, ' ') + "^"), r.message);
  }
}

BOOST_AUTO_TEST_CASE(unknown_symbols_list_the_valid_ones) {
  const Refusal r = refusal("M*G-");
  BOOST_TEST(contains(r.message, "'G' is not a valid layer symbol"), r.message);
  for (const char* valid : {"'*' (attention)", "'-' (MLP)", "'E' (MoE)", "'M' (Mamba-2)"})
    BOOST_TEST(contains(r.message, valid), r.message);
}

// A third-party layer takes a symbol through the stack's `symbols` option, with its key family.
BOOST_AUTO_TEST_CASE(configured_symbols_join_the_grammar) {
  const hy::SymbolTable table(
      boost::json::parse(R"({"num_layers": 3})"),
      boost::json::parse(
          R"({"G": {"component": "acme.gated_delta_net", "options": {"heads": 4}, "family": "self_attention"},
              "R": {"component": "acme.retention"}})"));
  BOOST_TEST(table.contains('G'));
  BOOST_TEST(table.at('G').component == "acme.gated_delta_net");
  BOOST_TEST(table.at('G').options == R"({"heads":4})");
  BOOST_TEST(table.at('G').options_path == "model.stack.options.symbols.G.options");
  BOOST_TEST(table.at('G').connection == "self_attention_hyper_connection.");
  BOOST_TEST(table.at('R').connection == "layer_hyper_connection.");
  const hy::Pattern p = hy::parse_pattern("G-R", rules(table));
  BOOST_TEST(p.main_layers == 3u);
  // G writes self_attention keys: it cannot share a group with attention; R writes its own.
  BOOST_CHECK_THROW(hy::parse_pattern("[G*]", rules(table)), hy::PatternError);
  BOOST_TEST(hy::parse_pattern("[R*]", rules(table)).logical_layers == 1u);
}

BOOST_AUTO_TEST_CASE(bad_symbol_maps_are_refused_naming_the_key) {
  const auto refused = [](const char* symbols, const char* expected) {
    try {
      hy::SymbolTable(boost::json::parse(R"({"num_layers": 1})"), boost::json::parse(symbols));
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(contains(e.what(), expected), e.what());
      return;
    }
    BOOST_FAIL(std::string("accepted: ") + symbols);
  };
  refused(R"({"XY": {"component": "a"}})",
          "model.stack.options.symbols.XY: a symbol is one printable character");
  refused(R"({"|": {"component": "a"}})", "model.stack.options.symbols.|");
  refused(R"({"X": "acme.layer"})", "model.stack.options.symbols.X: expected {");
  refused(R"({"X": {"options": {}}})", "model.stack.options.symbols.X.component: expected the name");
  refused(R"({"X": {"component": "a", "opts": {}}})", "unknown key 'opts'");
}

// What the stack hands the engine: checkpoint prefixes by logical index, final norm names.
BOOST_AUTO_TEST_CASE(stack_description_prefixes_and_final_norm) {
  const auto model = [](const char* pattern, int layers) {
    return boost::json::value{{"num_layers", layers}, {"pattern", pattern}};
  };
  {
    const hy::Stack gpt(boost::json::value{{"num_layers", 2}}, boost::json::value());
    const plx_stack_description& d = gpt.description();
    BOOST_TEST(d.num_layers == 4u);
    BOOST_TEST(d.num_logical == 2u);
    BOOST_TEST(std::string(d.layers[2]->checkpoint_prefix) == "decoder.layers.1.");
    BOOST_TEST(std::string(d.layers[2]->component) == "transformer.attention");
    BOOST_TEST(std::string(d.layers[3]->connection_prefix) == "mlp_hyper_connection.");
    BOOST_TEST(std::string(d.final_norm_prefix) == "decoder.final_layernorm.");
    BOOST_TEST(std::string(d.final_norm_aliases) == "decoder.final_norm.");
    BOOST_TEST(std::string(d.summary) == "the GPT of 2 layers");
  }
  {
    const hy::Stack hybrid(model("M*M-", 4), boost::json::value());
    const plx_stack_description& d = hybrid.description();
    BOOST_TEST(std::string(d.layers[3]->checkpoint_prefix) == "decoder.layers.3.");
    BOOST_TEST(std::string(d.layers[0]->component) == "mamba.mixer");
    BOOST_TEST(std::string(d.layers[0]->options_path) == "model.mamba.options");
    BOOST_TEST(std::string(d.final_norm_prefix) == "decoder.final_norm.");
    // The decoder facts the engine takes from the stack instead of knowing the symbols (ABI 1.6).
    BOOST_TEST(std::string(d.layers[0]->kind) == "mamba");
    BOOST_TEST(std::string(d.layers[1]->kind) == "attention");
    BOOST_TEST(std::string(d.layers[3]->kind) == "mlp");
    BOOST_TEST(std::string(d.summary) == "the pattern \"M*M-\"");
    BOOST_TEST(std::string(d.layout_keys) == "num_layers;pattern;mtp_num_layers");
  }
  {
    // MTP blocks: Megatron's GPT names (the one inner layer under transformer_layer.) and the
    // hybrid's (the nested stack's layers under mtp_model_layer.layers.j.).
    const hy::Stack gpt(boost::json::value{{"num_layers", 2}, {"mtp_num_layers", 2}}, boost::json::value());
    const plx_stack_description& d = gpt.description();
    BOOST_TEST(d.num_layers == 8u);
    BOOST_TEST(d.layers[6]->mtp_depth == 2u);
    BOOST_TEST(std::string(d.layers[5]->checkpoint_prefix) == "mtp.layers.0.transformer_layer.");
    BOOST_TEST(std::string(d.summary) == "the GPT of 2 layers and 2 MTP block(s)");
    const hy::Stack hybrid(model("M*M-/*-/*-", 4), boost::json::value());
    const plx_stack_description& h = hybrid.description();
    BOOST_TEST(std::string(h.layers[7]->checkpoint_prefix) == "mtp.layers.1.mtp_model_layer.layers.1.");
    BOOST_TEST_REQUIRE(h.layers[7]->mtp_depth == 2u);
    BOOST_CHECK_EXCEPTION(
        hy::Stack(boost::json::value{{"num_layers", 4}, {"pattern", "M*M-/*-"}, {"mtp_num_layers", 2}},
                  boost::json::value()),
        std::invalid_argument, [](const auto& e) { return contains(e.what(), "model.mtp_num_layers is 2"); });
  }
  {
    const hy::Stack moe_gpt(boost::json::value{{"num_layers", 4}, {"moe", {{"layer_freq", 2}}}},
                            boost::json::value());
    const plx_stack_description& d = moe_gpt.description();
    BOOST_TEST(std::string(d.layers[1]->kind) == "moe");
    BOOST_TEST(std::string(d.layers[3]->kind) == "mlp");
    BOOST_TEST(std::string(d.summary) ==
               "the GPT of 4 layers, an MoE MLP every 2 layers from layer 0 (model.moe.layer_freq)");
  }
  {
    const hy::Stack custom(model("*S", 2),
                           boost::json::parse(R"({"symbols": {"S": {"component": "acme.scale"}}})"));
    BOOST_TEST(std::string(custom.description().layers[1]->kind) == "layer 'S'");
  }
  {
    const hy::Stack grouped(model("M[M*]-", 4), boost::json::value());
    const plx_stack_description& d = grouped.description();
    BOOST_TEST(std::string(d.layers[1]->checkpoint_prefix) == "decoder.layers.1.");
    BOOST_TEST(std::string(d.layers[2]->checkpoint_prefix) == "decoder.layers.1.");
    BOOST_TEST(std::string(d.layers[3]->checkpoint_prefix) == "decoder.layers.2.");
    BOOST_TEST(std::string(d.final_norm_prefix) == "decoder.final_layernorm.");
  }
  BOOST_CHECK_EXCEPTION(hy::Stack(model("M*M-M*M-", 4), boost::json::value()), std::invalid_argument,
                        [](const auto& e) {
                          return contains(e.what(),
                                          "model.num_layers is 4, but model.pattern \"M*M-M*M-\" has 8 "
                                          "layers: set model.num_layers to 8");
                        });
  BOOST_CHECK_EXCEPTION(
      hy::Stack(model("M[M*", 3), boost::json::value()), std::invalid_argument,
      [](const auto& e) { return contains(e.what(), "model.pattern: '[' starts a layer group"); });
}
