// What each pattern symbol builds: its layer component, that component's options, the family of
// checkpoint keys it writes and the name of its mHC connection. Built in: '*' attention and '-'
// MLP from the model's attention and mlp sections, 'M' Mamba-2 from the mamba section, 'E' MoE;
// the stack's `symbols` option adds symbols or maps a built-in one to another component.
#pragma once

#include <boost/json/value.hpp>

#include <map>
#include <string>

namespace plexus::hybrid {

struct SymbolSpec {
  std::string component;
  std::string options;       // JSON text
  std::string options_path;  // "model.attention.options", for messages
  std::string family;        // checkpoint key family: "self_attention", "mlp", "mixer"; "" = its own
  std::string connection;    // mHC parameters' name: "self_attention_hyper_connection."
  std::string meaning;       // for `model show` and messages: "attention", "Mamba-2", ...
  std::string kind;          // the engine's word in a layer's label: "attention", "mlp", "mamba", "moe"
};

class SymbolTable {
 public:
  // model: the model section (component sections included); symbols: the stack's `symbols` option
  // ({"X": {"component": ..., "options": {...}, "family": ...}}). Throws std::invalid_argument
  // naming the offending key.
  SymbolTable(const boost::json::value& model, const boost::json::value& symbols);

  bool contains(char symbol) const { return specs_.count(symbol) != 0; }
  const SymbolSpec& at(char symbol) const;
  std::string valid_symbols() const;  // "'*', '-', 'E', 'M'"

 private:
  std::map<char, SymbolSpec> specs_;
};

// Characters the grammar reserves; no layer may take them.
bool reserved_symbol(char c);

}  // namespace plexus::hybrid
