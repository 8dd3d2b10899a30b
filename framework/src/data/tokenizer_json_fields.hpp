// Typed reads of tokenizer.json fields whose errors name the file and the field's path
// ("tok.json: model.merges[3]: ...").
#pragma once

#include <boost/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "data/bpe_state.hpp"

namespace plexus::data {

class JsonFields {
 public:
  explicit JsonFields(std::string source) : source_(std::move(source)) {}

  const std::string& source() const noexcept { return source_; }

  [[noreturn]] void fail(const std::string& path, const std::string& message) const;

  // A short rendering of a value for messages: its JSON text, cut at 60 characters.
  static std::string show(const boost::json::value& value);

  const boost::json::object& object(const boost::json::value& value, const std::string& path) const;
  const boost::json::array& array(const boost::json::value& value, const std::string& path) const;
  std::string string(const boost::json::value& value, const std::string& path) const;
  bool boolean(const boost::json::value& value, const std::string& path) const;
  // A token id: an integer in [0, 2^31).
  int32_t id(const boost::json::value& value, const std::string& path) const;

  // The member `key` of `object`, or nullptr when absent.
  static const boost::json::value* find(const boost::json::object& object, std::string_view key);
  const boost::json::value& require(const boost::json::object& object, std::string_view key,
                                    const std::string& path) const;
  // A boolean member, `fallback` when absent.
  bool boolean_or(const boost::json::object& object, std::string_view key, const std::string& path,
                  bool fallback) const;
  // An optional string member: absent or null -> "".
  std::string string_or_empty(const boost::json::object& object, std::string_view key,
                              const std::string& path) const;
  // The "type" member of a component object.
  std::string type_of(const boost::json::object& object, const std::string& path) const;

 private:
  std::string source_;
};

// The sections other than model and added_tokens (tokenizer_json_sections.cpp).
void read_normalizer(const JsonFields& f, const boost::json::value* value);
void read_pre_tokenizer(const JsonFields& f, const boost::json::value* value, PreTokenizerSpec& pre);
void read_decoder(const JsonFields& f, const boost::json::value* value);

}  // namespace plexus::data
