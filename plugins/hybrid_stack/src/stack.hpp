// The hybrid_stack component: the decoder described by a pattern (model.pattern), or the GPT's
// "[*-]" x num_layers when there is none. Owns the plx_stack_description it hands the engine.
#pragma once

#include <boost/json/value.hpp>

#include <memory>
#include <string>
#include <vector>

#include "pattern.hpp"
#include "plexus/stack.h"
#include "symbols.hpp"

namespace plexus::hybrid {

class Stack {
 public:
  // model: the model section; options: the component's options. Throws std::invalid_argument
  // (PatternError for the grammar) with the message the user sees.
  Stack(const boost::json::value& model, const boost::json::value& options);
  const plx_stack_description& description() const { return description_; }
  const Pattern& pattern() const { return pattern_; }

 private:
  struct LayerStrings {
    std::string symbol, component, options, options_path, checkpoint_prefix, connection_prefix, kind;
  };
  Pattern pattern_;
  std::vector<LayerStrings> strings_;
  std::vector<plx_stack_layer> layers_;
  std::vector<const plx_stack_layer*> pointers_;
  std::string final_norm_prefix_, final_norm_aliases_, summary_;
  plx_stack_description description_{};
};

}  // namespace plexus::hybrid
