// The decoder's connection: what carries the residual stream from the embedding through every
// decoder layer F to the final norm, and its gradient back (docs/architecture.md, "A stage in one
// sentence"). The model's stages ask it for F's input and give it F's output; they never look at
// the stream themselves, so the plain residual and mHC's n streams (docs/mhc.md) are one
// interface, and a change to mHC touches mhc_connection.cpp only.
//
// Units are the model's unit indices (one per layer component instance); the connection keeps
// whatever it needs per decoder unit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plexus/core/engine/model.hpp"
#include "plexus/core/engine/parameters.hpp"
#include "plexus/core/engine/step_profile.hpp"
#include "plexus/core/engine/tensor.hpp"

namespace plexus {

// One microbatch's stream and gradient between units, owned by the connection that made it.
class ConnectionState {
 public:
  virtual ~ConnectionState() = default;
};

// What a microbatch's connection state needs to know of it.
struct ConnectionRun {
  int64_t batch = 0, seq = 0;  // the microbatch's shape [batch, seq]
  uint32_t microbatch = 0;
  bool training = false;
  StepProfile* profile = nullptr;  // its parts are timed into this (nullptr: not timed)
};

class Connection {
 public:
  virtual ~Connection() = default;

  // Declares the parameters the connection adds around decoder unit `unit` (none for the
  // residual) into `store`, named under the layer's checkpoint `prefix`; returns their indices.
  virtual std::vector<std::size_t> declare(std::size_t unit, const std::string& prefix,
                                           const std::string& unit_label, ParameterStore& store) = 0;
  virtual std::unique_ptr<ConnectionState> start(const ConnectionRun& run) const = 0;

  // Forward. `first_stage`: the unit's first stage (a unit of several stages gets its inputs at
  // each; the connection does its work at the first and hands the same tensor after).
  // The embedding's output becomes the stream.
  virtual void enter(ConnectionState& state, Tensor embedded) const = 0;
  // Decoder unit `unit`'s input (F's u).
  virtual const Tensor& layer_input(ConnectionState& state, std::size_t unit, bool first_stage) const = 0;
  // F's output folded into the stream, after the unit's last stage.
  virtual void fold(ConnectionState& state, std::size_t unit, Tensor f) const = 0;
  // The final norm's input.
  virtual const Tensor& leave(ConnectionState& state, bool first_stage) const = 0;

  // Backward, in reverse. The final norm's input gradient becomes the stream's gradient.
  virtual void leave_backward(ConnectionState& state, Tensor grad) const = 0;
  // Decoder unit `unit`'s output gradient (F's df), at each of its backward stages.
  virtual const Tensor& layer_output_grad(ConnectionState& state, std::size_t unit,
                                          bool first_stage) const = 0;
  // F's input gradient folded into the stream's gradient, after the unit's last backward stage.
  virtual void fold_backward(ConnectionState& state, std::size_t unit, Tensor du) const = 0;
  // The embedding's output gradient.
  virtual const Tensor& enter_backward(ConnectionState& state, bool first_stage) const = 0;

  // What crosses a chunk boundary (model.hpp): the stream after a chunk's last unit, handed to
  // the next chunk's first, and its gradient the other way.
  virtual Tensor take_stream(ConnectionState& state) const = 0;
  virtual void set_stream(ConnectionState& state, Tensor stream) const = 0;
  virtual Tensor take_grad(ConnectionState& state) const = 0;
  virtual void set_grad(ConnectionState& state, Tensor grad) const = 0;

  // The shape of the stream of a [batch, seq] microbatch (in the model's activation dtype): what a
  // pipeline stage receives from the one before it.
  virtual std::vector<int64_t> stream_shape(int64_t batch, int64_t seq) const = 0;

  // The matrix-product FLOPs (forward + backward) it adds around one decoder unit, per token.
  virtual double flops_per_token() const = 0;

  // The bytes a training forward of `tokens` tokens (this rank's, as the stream holds them), in
  // activations of `element` bytes, keeps for the backward: around one decoder unit, and in the
  // stream state itself (the stream, and what the final norm reads).
  virtual double kept_bytes_per_unit(int64_t tokens, double element) const = 0;
  virtual double stream_bytes(int64_t tokens, double element) const = 0;
};

// The plain residual: stream += F(stream); its gradient passes F by the identity and adds F's.
std::unique_ptr<Connection> make_residual_connection(int64_t hidden_size);

// mHC around every decoder unit, with the fusion backend mhc.backend (mhc_connection.cpp).
std::unique_ptr<Connection> make_mhc_connection(const PluginHost& host, const ModelSettings& settings,
                                                DLDevice device, ParameterStore& store);

}  // namespace plexus
