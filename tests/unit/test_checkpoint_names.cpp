// How the engine's tensors appear in a checkpoint: a tensor's local and Transformer Engine
// spellings and aliases (the names its layer and the stack give it), and the stored layout of the mHC projection
// phi, [n*n + 2n, n*C] as Megatron's nn.Linear holds it, with the earlier layout recognised by
// the metadata key's absence.
#define BOOST_TEST_MODULE checkpoint_names
#include <boost/test/unit_test.hpp>

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "plexus/core/checkpoint/stored_tensor.hpp"
#include "plexus/core/checkpoint/tensor_names.hpp"

namespace ck = plexus::checkpoint;

namespace {

// A safetensors file in memory holding float32 tensors of the given shapes (values 0, 1, 2...).
ck::SafetensorsFile file_of(const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
                            bool marked, const std::string& marker = ck::kLinearLayoutOutIn) {
  std::vector<std::vector<float>> values;
  ck::SafetensorsWriter writer;
  for (const auto& [name, shape] : tensors) {
    auto& v = values.emplace_back(static_cast<std::size_t>(*ck::element_count(shape)));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
    writer.add(name, ck::DType::f32, shape, std::as_bytes(std::span<const float>(v)));
  }
  if (marked) writer.set_metadata(ck::kLinearLayoutKey, marker);
  return ck::SafetensorsFile::from_bytes(writer.to_bytes(), "test.safetensors");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const plexus::CheckpointError& e) {
    return e.what();
  }
  return "";
}

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const std::string kPhi = "decoder.layers.1.mlp_hyper_connection.mapping_proj.weight";

}  // namespace

// Which tensors have a second spelling is the layers' knowledge (plx_param_spec.te_name; the
// integration test test_checkpoint_names checks the in-tree layers declare Megatron's); here, what
// the checkpoint code does with the names it is given.
const ck::TensorNames kNorm{"decoder.layers.0.input_layernorm.weight",
                            "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight",
                            {}};

BOOST_AUTO_TEST_CASE(a_tensor_is_named_in_the_style_asked_for_and_its_moments_follow) {
  BOOST_TEST(kNorm.in(ck::NameStyle::local) == kNorm.local);
  BOOST_TEST(kNorm.in(ck::NameStyle::te) == kNorm.te);
  BOOST_TEST(kNorm.differ());
  const ck::TensorNames moment = kNorm.with_suffix(".exp_avg");
  BOOST_TEST(moment.local == "decoder.layers.0.input_layernorm.weight.exp_avg");
  BOOST_TEST(moment.te == "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight.exp_avg");
  const ck::TensorNames norm{"decoder.final_layernorm.weight", "decoder.final_layernorm.weight",
                             {"decoder.final_norm.weight"}};
  BOOST_TEST(norm.with_suffix(".exp_avg_sq").aliases == std::vector<std::string>{"decoder.final_norm.weight.exp_avg_sq"});
  const ck::TensorNames one = ck::TensorNames::one("output_layer.weight");
  BOOST_TEST(!one.differ());
  BOOST_TEST(one.in(ck::NameStyle::te) == "output_layer.weight");
  BOOST_TEST(one.aliases.empty());
}

BOOST_AUTO_TEST_CASE(an_alias_is_read_only_where_the_tensors_own_names_are_absent) {
  const ck::TensorNames norm{"decoder.final_layernorm.weight", "decoder.final_layernorm.weight",
                             {"decoder.final_norm.weight"}};
  const std::vector<int64_t> c{8};
  BOOST_TEST(ck::locate(file_of({{"decoder.final_norm.weight", c}}, true), norm, c, ck::NameStyle::local).name ==
             "decoder.final_norm.weight");
  BOOST_TEST(ck::locate(file_of({{"decoder.final_norm.weight", c}, {"decoder.final_layernorm.weight", c}}, true), norm,
                        c, ck::NameStyle::local)
                 .name == "decoder.final_layernorm.weight");
  // Written under its own name, never an alias.
  BOOST_TEST(ck::stored_form(norm, c, ck::NameStyle::te).name == "decoder.final_layernorm.weight");
}

BOOST_AUTO_TEST_CASE(style_names_parse) {
  BOOST_TEST((ck::parse_name_style("local") == ck::NameStyle::local));
  BOOST_TEST((ck::parse_name_style("te") == ck::NameStyle::te));
  BOOST_TEST(!ck::parse_name_style("TE").has_value());
  BOOST_TEST(!ck::parse_name_style("").has_value());
  BOOST_TEST(ck::to_string(ck::NameStyle::te) == "te");
  BOOST_TEST(ck::to_string(ck::NameStyle::local) == "local");
}

BOOST_AUTO_TEST_CASE(only_phi_and_its_moments_are_stored_transposed) {
  BOOST_TEST(ck::stored_transposed(kPhi));
  BOOST_TEST(ck::stored_transposed("decoder.layers.0.self_attention_hyper_connection.mapping_proj.weight"));
  BOOST_TEST(ck::stored_transposed(kPhi + ".exp_avg"));
  BOOST_TEST(!ck::stored_transposed("decoder.layers.1.mlp_hyper_connection.bias"));
  BOOST_TEST(!ck::stored_transposed("decoder.layers.1.mlp.linear_fc1.weight"));
  BOOST_TEST(!ck::stored_transposed(kPhi + "s"));

  const std::vector<int64_t> memory{128, 24};  // [n*C, n*n + 2n], n = 4, C = 32
  const ck::StoredTensor form = ck::stored_form(ck::TensorNames::one(kPhi), memory, ck::NameStyle::te);
  BOOST_TEST(form.name == kPhi);
  BOOST_TEST(form.shape == (std::vector<int64_t>{24, 128}));
  BOOST_TEST(form.transposed);
  const ck::StoredTensor norm = ck::stored_form(kNorm, std::vector<int64_t>{32}, ck::NameStyle::te);
  BOOST_TEST(norm.name == kNorm.te);
  BOOST_TEST(!norm.transposed);
}

BOOST_AUTO_TEST_CASE(either_spelling_is_found_and_both_are_refused) {
  const std::string local = kNorm.local, te = kNorm.te;
  const std::vector<int64_t> c{8};
  for (const auto style : {ck::NameStyle::local, ck::NameStyle::te}) {
    BOOST_TEST(ck::locate(file_of({{te, c}}, true), kNorm, c, style).name == te);
    BOOST_TEST(ck::locate(file_of({{local, c}}, true), kNorm, c, style).name == local);
    BOOST_TEST(ck::locate(file_of({{local, c}}, false), kNorm, c, style).name == local);
    // Missing: the spelling the run writes, for the mismatch report.
    BOOST_TEST(ck::locate(file_of({}, true), kNorm, c, style).name == kNorm.in(style));
  }
  const std::string e = error_of([&] {
    (void)ck::locate(file_of({{local, c}, {te, c}}, true), kNorm, c, ck::NameStyle::te);
  });
  BOOST_TEST(
      (mentions(e, "test.safetensors") && mentions(e, local) && mentions(e, te) && mentions(e, "twice")), e);
}

BOOST_AUTO_TEST_CASE(phi_layout_follows_the_marker_and_then_the_shape) {
  const std::vector<int64_t> wide{128, 24}, megatron{24, 128};
  // Written with the marker: Megatron's layout.
  const ck::StoredTensor marked =
      ck::locate(file_of({{kPhi, megatron}}, true), ck::TensorNames::one(kPhi), wide, ck::NameStyle::local);
  BOOST_TEST(marked.transposed);
  BOOST_TEST(!marked.earlier_layout);
  BOOST_TEST(marked.shape == megatron);
  // Without it, stored as in memory: the earlier layout, read as it is.
  const ck::StoredTensor earlier =
      ck::locate(file_of({{kPhi, wide}}, false), ck::TensorNames::one(kPhi), wide, ck::NameStyle::local);
  BOOST_TEST(!earlier.transposed);
  BOOST_TEST(earlier.earlier_layout);
  BOOST_TEST(earlier.shape == wide);
  // Without it, in Megatron's shape (a converted Megatron checkpoint): Megatron's layout.
  const ck::StoredTensor converted =
      ck::locate(file_of({{kPhi, megatron}}, false), ck::TensorNames::one(kPhi), wide, ck::NameStyle::local);
  BOOST_TEST(converted.transposed);
  BOOST_TEST(!converted.earlier_layout);
  // With the marker, the in-memory shape is wrong: expected Megatron's (reported as a mismatch).
  const ck::StoredTensor wrong = ck::locate(file_of({{kPhi, wide}}, true), ck::TensorNames::one(kPhi), wide, ck::NameStyle::local);
  BOOST_TEST(wrong.shape == megatron);
  BOOST_TEST(!wrong.earlier_layout);
}

// C = n + 2 (n = 4, C = 6): [n*C, n*n + 2n] = [24, 24] both ways; only the marker tells.
BOOST_AUTO_TEST_CASE(square_phi_is_told_apart_by_the_marker_alone) {
  const std::vector<int64_t> square{24, 24};
  const ck::StoredTensor marked =
      ck::locate(file_of({{kPhi, square}}, true), ck::TensorNames::one(kPhi), square, ck::NameStyle::local);
  BOOST_TEST(marked.transposed);
  BOOST_TEST(!marked.earlier_layout);
  const ck::StoredTensor unmarked =
      ck::locate(file_of({{kPhi, square}}, false), ck::TensorNames::one(kPhi), square, ck::NameStyle::local);
  BOOST_TEST(!unmarked.transposed);
  BOOST_TEST(unmarked.earlier_layout);
}

BOOST_AUTO_TEST_CASE(an_unknown_layout_marker_is_refused) {
  const std::string e = error_of([] {
    (void)ck::locate(file_of({{"embedding.word_embeddings.weight", {4, 2}}}, true, "[in, out]"),
                     ck::TensorNames::one("embedding.word_embeddings.weight"), std::vector<int64_t>{4, 2},
                     ck::NameStyle::local);
  });
  BOOST_TEST((mentions(e, "test.safetensors") && mentions(e, ck::kLinearLayoutKey) &&
              mentions(e, "[in, out]") && mentions(e, ck::kLinearLayoutOutIn)),
             e);
}

BOOST_AUTO_TEST_CASE(transpose_moves_every_element) {
  const int64_t rows = 3, cols = 5;
  std::vector<float> in(rows * cols), out(rows * cols), back(rows * cols);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) + 0.5F;
  ck::transpose(std::as_bytes(std::span<const float>(in)), rows, cols, sizeof(float),
                std::as_writable_bytes(std::span<float>(out)));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) BOOST_TEST(out[j * rows + i] == in[i * cols + j]);
  ck::transpose(std::as_bytes(std::span<const float>(out)), cols, rows, sizeof(float),
                std::as_writable_bytes(std::span<float>(back)));
  BOOST_TEST(back == in, boost::test_tools::per_element());
  std::vector<float> small(4);
  BOOST_CHECK_THROW(ck::transpose(std::as_bytes(std::span<const float>(in)), rows, cols, sizeof(float),
                                  std::as_writable_bytes(std::span<float>(small))),
                    std::invalid_argument);
}
