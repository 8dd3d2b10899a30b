#include "symbols.hpp"

#include <boost/json.hpp>

#include <stdexcept>

namespace plexus::hybrid {
namespace {

// A layer section of the model ({"component": ..., "options": {...}}), or the given defaults when
// the model has no such section.
SymbolSpec from_section(const boost::json::object& model, const char* section, const char* default_component) {
  SymbolSpec spec;
  spec.component = default_component;
  spec.options = "{}";
  spec.options_path = std::string("model.") + section + ".options";
  if (const auto* node = model.if_contains(section); node != nullptr && node->is_object()) {
    const auto& object = node->as_object();
    if (const auto* c = object.if_contains("component"); c != nullptr && c->is_string())
      spec.component = std::string(c->as_string());
    if (const auto* o = object.if_contains("options"); o != nullptr && o->is_object())
      spec.options = boost::json::serialize(*o);
  }
  return spec;
}

}  // namespace

bool reserved_symbol(char c) {
  return c == '[' || c == ']' || c == '|' || c == '/' || c == ' ' || c == '\t' || c == '\n' ||
         static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e;
}

SymbolTable::SymbolTable(const boost::json::value& model_value, const boost::json::value& symbols) {
  const boost::json::object& model = model_value.as_object();
  SymbolSpec attention = from_section(model, "attention", "transformer.attention");
  attention.family = "self_attention";
  attention.connection = "self_attention_hyper_connection.";
  attention.meaning = "attention";
  attention.kind = "attention";
  specs_['*'] = attention;
  SymbolSpec mlp = from_section(model, "mlp", "transformer.mlp");
  mlp.family = "mlp";
  mlp.connection = "mlp_hyper_connection.";
  mlp.meaning = "MLP";
  mlp.kind = "mlp";
  specs_['-'] = mlp;
  SymbolSpec mamba = from_section(model, "mamba", "mamba.mixer");
  mamba.family = "mixer";
  mamba.connection = "mixer_hyper_connection.";
  mamba.meaning = "Mamba-2";
  mamba.kind = "mamba";
  specs_['M'] = mamba;
  SymbolSpec moe = from_section(model, "moe", "moe.layer");
  moe.family = "mlp";
  moe.connection = "mlp_hyper_connection.";
  moe.meaning = "MoE";
  moe.kind = "moe";
  specs_['E'] = moe;

  if (symbols.is_null()) return;
  if (!symbols.is_object()) throw std::invalid_argument("model.stack.options.symbols: expected an object");
  for (const auto& [key, value] : symbols.as_object()) {
    const std::string path = "model.stack.options.symbols." + std::string(key);
    if (key.size() != 1 || reserved_symbol(key[0]))
      throw std::invalid_argument(path + ": a symbol is one printable character other than '[', ']', '|' and '/'");
    if (!value.is_object())
      throw std::invalid_argument(path + ": expected {\"component\": NAME, \"options\": {...}, \"family\": NAME}");
    const auto& object = value.as_object();
    for (const auto& [field, ignored] : object)
      if (field != "component" && field != "options" && field != "family" && field != "connection")
        throw std::invalid_argument(path + ": unknown key '" + std::string(field) +
                                    "' (expected component, options, family, connection)");
    const char symbol = key[0];
    SymbolSpec spec = contains(symbol) ? specs_.at(symbol) : SymbolSpec{};
    const auto* component = object.if_contains("component");
    if (component == nullptr || !component->is_string() || component->as_string().empty())
      throw std::invalid_argument(path + ".component: expected the name of a layer component");
    spec.component = std::string(component->as_string());
    spec.options = "{}";
    spec.options_path = path + ".options";
    if (const auto* options = object.if_contains("options")) {
      if (!options->is_object()) throw std::invalid_argument(path + ".options: expected an object");
      spec.options = boost::json::serialize(*options);
    }
    if (const auto* family = object.if_contains("family")) {
      if (!family->is_string() || family->as_string().empty())
        throw std::invalid_argument(path + ".family: expected a name, e.g. \"self_attention\"");
      spec.family = std::string(family->as_string());
    }  // a new symbol without a family writes keys of its own: no collision is assumed
    if (const auto* connection = object.if_contains("connection")) {
      if (!connection->is_string() || connection->as_string().empty())
        throw std::invalid_argument(path + ".connection: expected a parameter name prefix");
      spec.connection = std::string(connection->as_string());
      if (spec.connection.back() != '.') spec.connection += '.';
    } else if (spec.connection.empty()) {
      spec.connection = (spec.family.empty() ? std::string("layer") : spec.family) + "_hyper_connection.";
    }
    if (spec.meaning.empty()) spec.meaning = spec.component;
    if (spec.kind.empty()) spec.kind = std::string("layer '") + symbol + "'";
    specs_[symbol] = spec;
  }
}

const SymbolSpec& SymbolTable::at(char symbol) const { return specs_.at(symbol); }

std::string SymbolTable::valid_symbols() const {
  std::string list;
  for (const auto& [symbol, spec] : specs_) {
    if (!list.empty()) list += ", ";
    list += std::string("'") + symbol + "' (" + spec.meaning + ")";
  }
  return list;
}

}  // namespace plexus::hybrid
