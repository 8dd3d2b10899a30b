#include "checkpoint_inspect.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "checkpoint_convert.hpp"
#include "plexus/core/engine/decoder_plan.hpp"
#include "plexus/core/json_text.hpp"

namespace plexus::cli {
namespace {

namespace fs = std::filesystem;
namespace ck = checkpoint;

struct Row {
  std::string name;
  std::string layer;  // "decoder.layers.3." for a layer's tensor, "" for the others
  ck::DType dtype = ck::DType::f32;
  std::vector<std::int64_t> shape;
  std::int64_t elements = 0;
  std::uint64_t bytes = 0;
};

// The layer prefix of a tensor name: up to the last "layers.<index>." in it, which for an MTP block's
// layer ("mtp.layers.0.layers.5.") is the layer's own.
std::string layer_of(std::string_view name) {
  std::size_t end = 0;
  for (std::size_t at = name.find("layers."); at != std::string_view::npos;
       at = name.find("layers.", at + 1)) {
    if (at > 0 && name[at - 1] != '.') continue;
    std::size_t digits = at + 7;
    while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') ++digits;
    if (digits > at + 7 && digits < name.size() && name[digits] == '.') end = digits + 1;
  }
  return std::string(name.substr(0, end));
}

// Orders the embedding first, then each layer by its number (decoder.layers.2 before .10), then
// the rest (final norm, output layer) by name.
auto order_key(const Row& row) {
  const bool embedding = row.layer.empty() && row.name.starts_with("embedding.");
  const int rank = embedding ? 0 : row.layer.empty() ? 2 : 1;
  std::string base;
  std::int64_t index = 0;
  if (!row.layer.empty()) {
    const std::string_view layer(row.layer.data(), row.layer.size() - 1);  // without the final '.'
    const std::size_t dot = layer.rfind('.');
    base = std::string(layer.substr(0, dot));
    (void)std::from_chars(layer.data() + dot + 1, layer.data() + layer.size(), index);
  }
  return std::make_tuple(rank, base, index, row.name);
}

std::vector<Row> rows_of(const ck::SafetensorsFile& file) {
  std::vector<Row> rows;
  for (const ck::TensorView& view : file.tensors()) {
    Row row;
    row.name = std::string(view.name);
    row.layer = layer_of(view.name);
    row.dtype = view.dtype;
    row.shape.assign(view.shape.begin(), view.shape.end());
    row.elements = ck::element_count(view.shape).value_or(0);
    row.bytes = view.bytes.size();
    rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return order_key(a) < order_key(b); });
  return rows;
}

std::uint64_t file_bytes(const fs::path& file) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  return ec ? 0 : size;
}

// state.json's object (a checkpoint's state.json is valid JSON, not necessarily an object).
const boost::json::object& state_of(const ck::LoadedCheckpoint& loaded) {
  static const boost::json::object empty;
  return loaded.state.is_object() ? loaded.state.as_object() : empty;
}

const boost::json::object* model_section(const boost::json::value& state) {
  const boost::json::value* config = state.is_object() ? state.as_object().if_contains("config") : nullptr;
  const boost::json::value* model =
      config != nullptr && config->is_object() ? config->as_object().if_contains("model") : nullptr;
  return model != nullptr && model->is_object() ? &model->as_object() : nullptr;
}

std::string text_of(const boost::json::object& object, const char* key) {
  const boost::json::value* value = object.if_contains(key);
  if (value == nullptr) return "?";
  return value->is_string() ? std::string(value->as_string()) : json_text(*value);
}

// A message on one line: the lines after the first joined with "; ".
std::string one_line(const std::string& text) {
  std::string line;
  for (std::size_t at = 0; at < text.size();) {
    if (text[at] != '\n') {
      line += text[at++];
      continue;
    }
    while (at < text.size() && (text[at] == '\n' || text[at] == ' ')) ++at;
    if (at < text.size()) line += "; ";
  }
  return line;
}

// The decoder as the saved config's stack describes it, or why it cannot be told.
struct Decoder {
  std::optional<DecoderPlan> plan;
  std::string unknown;  // why, when there is no plan
};

Decoder decoder_of(const ck::LoadedCheckpoint& loaded, const PluginLoadOptions& plugins) {
  if (model_section(loaded.state) == nullptr) return {std::nullopt, "state.json has no run config"};
  // Inspecting never fails for the decoder: the tensors are there to see whatever the stack says.
  try {
    const SavedModel saved(loaded, plugins);
    return {saved.plan(saved.config(), saved.state_file().string()), ""};
  } catch (const std::exception& e) {
    return {std::nullopt, one_line(e.what())};
  }
}

// "the GPT of 2 layers, hidden 32, 4 heads, sequence 32, vocabulary 256": the decoder in its
// stack's words, then the model's sizes.
std::string model_summary(const boost::json::value& state, const Decoder& decoder) {
  const boost::json::object* model = model_section(state);
  if (model == nullptr) return "unknown (state.json has no run config)";
  std::string text = decoder.plan ? decoder.plan->summary : "decoder unknown (" + decoder.unknown + ")";
  text += ", hidden " + text_of(*model, "hidden_size") + ", " + text_of(*model, "num_attention_heads") +
          " heads, sequence " + text_of(*model, "seq_length") + ", vocabulary " +
          text_of(*model, "vocab_size");
  const boost::json::value* config = state.as_object().if_contains("config");
  const boost::json::value* mhc = config->as_object().if_contains("mhc");
  if (mhc != nullptr && mhc->is_object() && mhc->as_object().contains("enabled") &&
      mhc->at("enabled") == true)
    text += ", mHC with " + text_of(mhc->as_object(), "num_residual_streams") + " residual streams";
  return text;
}

// checkpoint prefix -> "attention (transformer.attention) and mlp (transformer.mlp)": the layers the
// stack stores under it.
std::map<std::string, std::string> layers_by_prefix(const Decoder& decoder) {
  std::map<std::string, std::string> layers;
  if (!decoder.plan) return layers;
  for (const DecoderLayerPlan& layer : decoder.plan->layers) {
    std::string& text = layers[layer.checkpoint_prefix];
    text += (text.empty() ? "" : " and ") + layer.kind + " (" + layer.component + ")";
  }
  return layers;
}

boost::json::object decoder_json(const Decoder& decoder) {
  if (!decoder.plan) return {{"unknown", decoder.unknown}};
  boost::json::array layers;
  for (const DecoderLayerPlan& layer : decoder.plan->layers)
    layers.push_back(boost::json::object{{"label", layer.label},
                                         {"kind", layer.kind},
                                         {"component", layer.component},
                                         {"checkpoint_prefix", layer.checkpoint_prefix},
                                         {"physical", layer.physical},
                                         {"logical", layer.logical},
                                         {"mtp_depth", layer.mtp_depth}});
  return {{"summary", decoder.plan->summary},
          {"layers", std::move(layers)},
          {"final_norm_prefix", decoder.plan->final_norm_prefix}};
}

std::string padded(const std::string& text, std::size_t width) {
  return text.size() >= width ? text + " " : text + std::string(width - text.size(), ' ');
}

std::string right(const std::string& text, std::size_t width) {
  return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

struct Totals {
  std::int64_t parameters = 0;
  std::uint64_t bytes = 0;
};

Totals totals_of(const std::vector<Row>& rows) {
  Totals t;
  for (const Row& row : rows) {
    t.parameters += row.elements;
    t.bytes += row.bytes;
  }
  return t;
}

// What verify_checkpoint found, per file, for a person: "model.safetensors: 12 tensors verified
// (checksums match, values finite)", or each problem.
std::string verification_text(const ck::CheckpointCheck& check) {
  std::string text = "\nverification (--verify):\n";
  for (const ck::FileCheck& f : check.files) {
    text += "  " + f.file.filename().string() + ": " + std::to_string(f.tensors) + " tensors, ";
    text += f.has_checksums
                ? std::string("checksums (XXH64) and values checked")
                : std::string("values checked; no checksums recorded (written before Plexus recorded them)");
    text += f.problems.empty() ? ": all good\n" : ": " + std::to_string(f.problems.size()) + " bad\n";
    for (const std::string& p : f.problems) text += "    " + p + "\n";
  }
  for (const std::string& c : check.consistency) text += "  " + c + "\n";
  text +=
      check.ok() ? "  the checkpoint is intact\n" : "  the checkpoint is DAMAGED: plexus-train refuses it\n";
  return text;
}

boost::json::object verification_json(const ck::CheckpointCheck& check) {
  boost::json::array files;
  for (const ck::FileCheck& f : check.files) {
    boost::json::array problems;
    for (const std::string& p : f.problems) problems.emplace_back(p);
    files.push_back(boost::json::object{{"file", f.file.string()},
                                        {"tensors", f.tensors},
                                        {"has_checksums", f.has_checksums},
                                        {"problems", std::move(problems)}});
  }
  boost::json::array consistency;
  for (const std::string& c : check.consistency) consistency.emplace_back(c);
  return {{"ok", check.ok()}, {"files", std::move(files)}, {"consistency", std::move(consistency)}};
}

void print_json(const ck::LoadedCheckpoint& loaded, const Decoder& decoder, const std::vector<Row>& rows,
                const Totals& model, const Totals& optimizer, std::ostream& out,
                const ck::CheckpointCheck* check) {
  boost::json::array tensors;
  for (const Row& row : rows) {
    boost::json::array shape(row.shape.begin(), row.shape.end());
    tensors.push_back(boost::json::object{{"name", row.name},
                                          {"layer", row.layer},
                                          {"shape", std::move(shape)},
                                          {"dtype", std::string(ck::to_string(row.dtype))},
                                          {"elements", row.elements},
                                          {"bytes", row.bytes}});
  }
  boost::json::object state;
  for (const auto& [key, value] : state_of(loaded))
    if (key != "config") state[key] = value;
  boost::json::object model_file;
  model_file["file"] = (loaded.dir / ck::kModelFile).string();
  model_file["file_bytes"] = file_bytes(loaded.dir / ck::kModelFile);
  model_file["tensor_count"] = rows.size();
  model_file["parameters"] = model.parameters;
  model_file["tensor_bytes"] = model.bytes;
  model_file["tensors"] = std::move(tensors);
  boost::json::object optimizer_file;
  optimizer_file["file"] = (loaded.dir / ck::kOptimizerFile).string();
  optimizer_file["file_bytes"] = file_bytes(loaded.dir / ck::kOptimizerFile);
  optimizer_file["tensor_count"] = loaded.optimizer.size();
  optimizer_file["elements"] = optimizer.parameters;
  optimizer_file["tensor_bytes"] = optimizer.bytes;
  boost::json::object document;
  document["checkpoint"] = loaded.dir.string();
  document["step"] = loaded.step;
  document["complete"] = true;
  document["state"] = std::move(state);
  document["model_file"] = std::move(model_file);
  document["optimizer_file"] = std::move(optimizer_file);
  const boost::json::value* config = state_of(loaded).if_contains("config");
  document["config"] = config != nullptr ? *config : boost::json::value(nullptr);
  document["decoder"] = decoder_json(decoder);
  if (check != nullptr) document["verification"] = verification_json(*check);
  out << json_text(document, 2) << "\n";
}

void print_text(const ck::LoadedCheckpoint& loaded, const Decoder& decoder, const std::vector<Row>& rows,
                const Totals& model, const Totals& optimizer, std::ostream& out,
                const ck::CheckpointCheck* check) {
  // One "label  value" line each: the directory, the step, the rest of the state, the model.
  std::vector<std::pair<std::string, std::string>> lines{
      {"checkpoint", loaded.dir.string()},
      {"step", std::to_string(loaded.step) + " (COMPLETE marker present, file sizes as recorded)"}};
  for (const auto& [key, value] : state_of(loaded))
    if (key != "config" && key != "step")
      lines.emplace_back(std::string(key),
                         value.is_string() ? std::string(value.as_string()) : json_text(value));
  lines.emplace_back("model", model_summary(loaded.state, decoder));
  std::size_t label_width = 0;
  for (const auto& line : lines) label_width = std::max(label_width, line.first.size() + 2);
  for (const auto& [label, value] : lines) out << padded(label, label_width) << value << "\n";

  std::size_t name_width = 0, shape_width = 0;
  for (const Row& row : rows) {
    name_width = std::max(name_width,
                          (row.layer.empty() ? row.name.size() : 2 + row.name.size() - row.layer.size()) + 2);
    shape_width = std::max(shape_width, ck::shape_text(row.shape).size());
  }
  out << "\n"
      << ck::kModelFile << ": " << rows.size() << " tensors, " << model.parameters << " parameters, "
      << model.bytes << " bytes of tensors (file " << file_bytes(loaded.dir / ck::kModelFile) << " bytes)\n";
  const std::map<std::string, std::string> stored = layers_by_prefix(decoder);
  std::string layer;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    if (!row.layer.empty() && row.layer != layer) {
      std::vector<Row> members;
      for (std::size_t j = i; j < rows.size() && rows[j].layer == row.layer; ++j) members.push_back(rows[j]);
      const Totals t = totals_of(members);
      const auto layers = stored.find(row.layer);
      out << "  " << row.layer << "  (" << members.size() << " tensors, " << t.parameters << " parameters, "
          << t.bytes << " bytes)" << (layers != stored.end() ? ": " + layers->second : std::string()) << "\n";
    }
    layer = row.layer;
    const std::string label = row.layer.empty() ? row.name : "  " + row.name.substr(row.layer.size());
    out << "  " << padded(label, name_width) << padded(ck::shape_text(row.shape), shape_width + 1)
        << padded(std::string(ck::to_string(row.dtype)), 6) << right(std::to_string(row.bytes), 12) << "\n";
  }
  out << "\n"
      << ck::kOptimizerFile << ": " << loaded.optimizer.size() << " tensors, " << optimizer.parameters
      << " elements, " << optimizer.bytes << " bytes of tensors (file "
      << file_bytes(loaded.dir / ck::kOptimizerFile) << " bytes)\n";
  if (check != nullptr) out << verification_text(*check);
}

}  // namespace

void print_inspection(const ck::LoadedCheckpoint& loaded, bool json, const PluginLoadOptions& plugins,
                      std::ostream& out, const ck::CheckpointCheck* check) {
  const Decoder decoder = decoder_of(loaded, plugins);
  const std::vector<Row> rows = rows_of(loaded.model);
  const Totals model = totals_of(rows);
  const Totals optimizer = totals_of(rows_of(loaded.optimizer));
  if (json)
    print_json(loaded, decoder, rows, model, optimizer, out, check);
  else
    print_text(loaded, decoder, rows, model, optimizer, out, check);
}

}  // namespace plexus::cli
