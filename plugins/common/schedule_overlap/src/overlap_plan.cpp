#include "plexus_schedule_overlap/overlap_plan.hpp"

#include <cstddef>
#include <deque>

namespace plexus::schedule_overlap {
namespace {

struct Cursor {
  const std::vector<Node>* nodes;
  std::size_t next = 0;
  bool issued_this_slot = false;

  bool done() const { return next == nodes->size(); }
  const Node& head() const { return (*nodes)[next]; }
  std::size_t left() const { return nodes->size() - next; }
  bool ready() const { return !done() && !issued_this_slot; }
};

}  // namespace

std::vector<Node> interleave(const std::vector<Node>& forward, const std::vector<Node>& backward,
                             bool split_weights) {
  Cursor fwd{&forward};
  Cursor bwd{&backward};
  std::deque<Node> weights_due;
  std::vector<Node> order;
  order.reserve(forward.size() + backward.size() * 2);

  auto issue = [&](Cursor& c) {
    const Node node = c.head();
    order.push_back(node);
    ++c.next;
    c.issued_this_slot = true;
    // Stage 0 is a backward unit's last: its weight gradients are now computable.
    if (split_weights && node.pass == Pass::backward && node.stage == 0)
      weights_due.push_back(Node{Pass::weights, node.microbatch, node.unit, 0, false});
  };

  while (!fwd.done() || !bwd.done()) {
    fwd.issued_this_slot = bwd.issued_this_slot = false;
    // Communication first: started before this slot's computation, it runs under it.
    for (Cursor* c : {&bwd, &fwd})
      if (c->ready() && c->head().comm) issue(*c);
    Cursor* compute = nullptr;
    for (Cursor* c : {&bwd, &fwd})
      if (c->ready() && !c->head().comm && (compute == nullptr || c->left() > compute->left())) compute = c;
    if (compute != nullptr) {
      issue(*compute);
    } else if (!weights_due.empty()) {
      order.push_back(weights_due.front());
      weights_due.pop_front();
    }
  }
  order.insert(order.end(), weights_due.begin(), weights_due.end());
  return order;
}

}  // namespace plexus::schedule_overlap
