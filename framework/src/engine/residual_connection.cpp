// The plain residual connection: one stream [B, S, C]; each decoder layer adds its output to it,
// and in backward the stream's gradient reaches F's input by the identity and gets F's input
// gradient added.
#include "engine/connection.hpp"
#include "engine/device_ops.hpp"

namespace plexus {
namespace {

struct ResidualState final : ConnectionState {
  Tensor stream;
  Tensor grad;
};

ResidualState& residual(ConnectionState& state) {
  return static_cast<ResidualState&>(state);
}

class ResidualConnection final : public Connection {
 public:
  explicit ResidualConnection(int64_t hidden) : hidden_(hidden) {}
  std::vector<std::size_t> declare(std::size_t, const std::string&, const std::string&,
                                   ParameterStore&) override {
    return {};
  }
  std::unique_ptr<ConnectionState> start(const ConnectionRun&) const override {
    return std::make_unique<ResidualState>();
  }

  void enter(ConnectionState& state, Tensor embedded) const override {
    residual(state).stream = std::move(embedded);
  }
  const Tensor& layer_input(ConnectionState& state, std::size_t, bool) const override {
    return residual(state).stream;
  }
  void fold(ConnectionState& state, std::size_t, Tensor f) const override {
    device_ops::add_into(residual(state).stream, f);
  }
  const Tensor& leave(ConnectionState& state, bool) const override { return residual(state).stream; }

  void leave_backward(ConnectionState& state, Tensor grad) const override {
    residual(state).grad = std::move(grad);
  }
  const Tensor& layer_output_grad(ConnectionState& state, std::size_t, bool) const override {
    return residual(state).grad;
  }
  void fold_backward(ConnectionState& state, std::size_t, Tensor du) const override {
    device_ops::add_into(residual(state).grad, du);
  }
  const Tensor& enter_backward(ConnectionState& state, bool) const override { return residual(state).grad; }

  Tensor take_stream(ConnectionState& state) const override { return std::move(residual(state).stream); }
  void set_stream(ConnectionState& state, Tensor stream) const override {
    residual(state).stream = std::move(stream);
  }
  Tensor take_grad(ConnectionState& state) const override { return std::move(residual(state).grad); }
  void set_grad(ConnectionState& state, Tensor grad) const override {
    residual(state).grad = std::move(grad);
  }

  std::vector<int64_t> stream_shape(int64_t batch, int64_t seq) const override {
    return {batch, seq, hidden_};
  }
  double flops_per_token() const override { return 0; }
  // Nothing around a unit (F keeps its own input's norm); one stream, added into in place.
  double kept_bytes_per_unit(int64_t, double) const override { return 0; }
  double stream_bytes(int64_t tokens, double element) const override {
    return element * static_cast<double>(tokens * hidden_);
  }

 private:
  int64_t hidden_;
};

}  // namespace

std::unique_ptr<Connection> make_residual_connection(int64_t hidden_size) {
  return std::make_unique<ResidualConnection>(hidden_size);
}

}  // namespace plexus
