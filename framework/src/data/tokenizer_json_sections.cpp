// The normalizer, pre_tokenizer and decoder sections of tokenizer.json: what byte-level BPE
// uses is read, everything else refused by name.
#include "data/tokenizer_json_fields.hpp"

namespace plexus::data {
namespace {

void read_byte_level(const JsonFields& f, const boost::json::object& o, const std::string& path,
                     PreTokenizerSpec& pre) {
  // Hugging Face requires add_prefix_space and trim_offsets and defaults use_regex to true.
  pre.add_prefix_space = f.boolean(f.require(o, "add_prefix_space", path), path + ".add_prefix_space");
  pre.trim_offsets = f.boolean(f.require(o, "trim_offsets", path), path + ".trim_offsets");
  pre.use_regex = f.boolean_or(o, "use_regex", path, true);
}

SplitStep read_split(const JsonFields& f, const boost::json::object& o, const std::string& path) {
  SplitStep step;
  const std::string pattern_path = path + ".pattern";
  const boost::json::object& pattern = f.object(f.require(o, "pattern", path), pattern_path);
  if (const auto* regex = JsonFields::find(pattern, "Regex")) {
    step.pattern = f.string(*regex, pattern_path + ".Regex");
    try {
      step.regex = std::make_shared<const SplitRegex>(step.pattern);
    } catch (const RegexError& e) {
      f.fail(pattern_path + ".Regex", std::string("unsupported pattern: ") + e.what());
    }
  } else if (const auto* literal = JsonFields::find(pattern, "String")) {
    step.is_regex = false;
    step.pattern = f.string(*literal, pattern_path + ".String");
    if (step.pattern.empty()) f.fail(pattern_path + ".String", "an empty string splits nothing");
  } else {
    f.fail(pattern_path, "expected {\"Regex\": ...} or {\"String\": ...}, got " + JsonFields::show(pattern));
  }
  const std::string behavior = f.string(f.require(o, "behavior", path), path + ".behavior");
  if (behavior != "Isolated")
    f.fail(path + ".behavior", "\"" + behavior +
                                   "\" is not supported (supported: \"Isolated\", which GPT-style "
                                   "tokenizers use: every match and every run between matches a piece)");
  if (f.boolean_or(o, "invert", path, false)) f.fail(path + ".invert", "true is not supported");
  return step;
}

}  // namespace

void read_normalizer(const JsonFields& f, const boost::json::value* value) {
  if (value == nullptr || value->is_null()) return;
  const boost::json::object& o = f.object(*value, "normalizer");
  const std::string type = f.type_of(o, "normalizer");
  if (type == "Sequence") {
    const auto* parts = JsonFields::find(o, "normalizers");
    if (parts == nullptr || (parts->is_array() && parts->get_array().empty())) return;
  }
  f.fail("normalizer",
         "type \"" + type +
             "\" is not supported: Plexus applies no normalizer (byte-level BPE tokenizers such as "
             "GPT-2's and Llama 3's have none)");
}

void read_pre_tokenizer(const JsonFields& f, const boost::json::value* value, PreTokenizerSpec& pre) {
  const std::string path = "pre_tokenizer";
  if (value == nullptr || value->is_null())
    f.fail(path, "missing: a byte-level BPE needs a ByteLevel pre-tokenizer");
  const boost::json::object& o = f.object(*value, path);
  const std::string type = f.type_of(o, path);
  if (type == "ByteLevel") {
    read_byte_level(f, o, path, pre);
    return;
  }
  if (type != "Sequence")
    f.fail(path + ".type", "\"" + type +
                               "\" is not supported (supported: ByteLevel, or a Sequence of Split steps "
                               "ending with ByteLevel)");
  pre.sequence = true;
  const boost::json::array& steps = f.array(f.require(o, "pretokenizers", path), path + ".pretokenizers");
  bool byte_level = false;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const std::string step_path = path + ".pretokenizers[" + std::to_string(i) + "]";
    const boost::json::object& step = f.object(steps[i], step_path);
    const std::string step_type = f.type_of(step, step_path);
    if (byte_level) f.fail(step_path, "ByteLevel must be the last step of the Sequence");
    if (step_type == "Split") {
      pre.splits.push_back(read_split(f, step, step_path));
    } else if (step_type == "ByteLevel") {
      read_byte_level(f, step, step_path, pre);
      byte_level = true;
    } else {
      f.fail(step_path + ".type", "\"" + step_type + "\" is not supported (supported: Split, ByteLevel)");
    }
  }
  if (!byte_level) f.fail(path + ".pretokenizers", "no ByteLevel step: a byte-level BPE needs one, last");
}

void read_decoder(const JsonFields& f, const boost::json::value* value) {
  if (value == nullptr || value->is_null())
    f.fail("decoder", "missing: a byte-level BPE decodes with the ByteLevel decoder");
  const boost::json::object& o = f.object(*value, "decoder");
  const std::string type = f.type_of(o, "decoder");
  if (type != "ByteLevel") f.fail("decoder.type", "\"" + type + "\" is not supported (supported: ByteLevel)");
}

}  // namespace plexus::data
