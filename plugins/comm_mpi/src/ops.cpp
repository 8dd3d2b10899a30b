// Argument checks and MPI calls of every operation; see ops.hpp.
//
// Counts: MPI counts are int. all_reduce, broadcast, send and recv split a larger transfer into
// pieces of at most the communicator's chunk_elements (every rank splits the same way, since the
// sizes agree); all_gather, reduce_scatter and all_to_all_v refuse counts and offsets above
// INT_MAX elements. Elements that are not reduced move as opaque units of their size.
#include "ops.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <vector>

#include "buffers.hpp"
#include "plexus/cpp/error.hpp"
#include "plexus/cpp/tensor.hpp"

namespace plexus::comm_mpi::ops {
namespace {

using plexus::sdk::dtype_name;
using plexus::sdk::Error;

std::string call_of(const Communicator& comm, const std::string& name) {
  return name + " (" + comm.context() + ")";
}

std::shared_ptr<Operation> operation_named(const std::string& name) {
  auto op = std::make_shared<Operation>();
  op->name = name;
  return op;
}

// Posts `post(first, count)` for consecutive pieces of at most `chunk` elements; at least one
// call even for an empty buffer, so every rank posts the same calls.
template <class Post>
void in_chunks(int64_t numel, int64_t chunk, Post post) {
  int64_t first = 0;
  do {
    const int64_t count = std::min(chunk, numel - first);
    post(first, static_cast<int>(count));
    first += count;
  } while (first < numel);
}

void check_peer(const Communicator& comm, int32_t peer, int32_t tag, const std::string& call) {
  if (peer < 0 || peer >= comm.size())
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": peer " + std::to_string(peer) +
                                              " is not a rank of this communicator (ranks 0.." +
                                              std::to_string(comm.size() - 1) + ")");
  if (peer == comm.rank())
    throw Error(PLX_ERR_INVALID_ARGUMENT,
                call + ": peer " + std::to_string(peer) +
                    " is this rank itself; a rank does not send to or receive from itself");
  if (tag < 0 || tag > comm.runtime()->tag_ub())
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": tag " + std::to_string(tag) + " is outside 0.." +
                                              std::to_string(comm.runtime()->tag_ub()));
}

struct VCounts {
  std::vector<int> counts, displacements;
};
VCounts checked_counts(const Communicator& comm, const int64_t* counts, const int64_t* offsets,
                       const View& view, const char* side, const std::string& call) {
  const std::string counts_name = std::string(side) + "_counts";
  const std::string offsets_name = std::string(side) + "_offsets";
  if (counts == nullptr || offsets == nullptr)
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": " + (counts == nullptr ? counts_name : offsets_name) +
                                              " is NULL (it needs " + std::to_string(comm.size()) +
                                              " entries)");
  VCounts v;
  for (int32_t j = 0; j < comm.size(); ++j) {
    const int64_t count = counts[j];
    const int64_t offset = offsets[j];
    // Chars, not one-character literals: "[" + std::string&& trips a false -Wrestrict of GCC 12
    // at -O3 inside libstdc++ (cmake/PlexusWarnings.cmake).
    const std::string at = '[' + std::to_string(j) + ']';
    if (count < 0 || offset < 0)
      throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": " + (count < 0 ? counts_name : offsets_name) + at +
                                                " is negative (" +
                                                std::to_string(count < 0 ? count : offset) + ")");
    if (count > view.numel || offset > view.numel - count)
      throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": " + offsets_name + at + " + " + counts_name + at +
                                                " = " + std::to_string(offset) + " + " +
                                                std::to_string(count) + " exceeds " + side + "'s " +
                                                std::to_string(view.numel) + " elements");
    expect_int_count(count, counts_name + at + " elements", call);
    expect_int_count(offset, offsets_name + at + " elements of offset", call);
    v.counts.push_back(static_cast<int>(count));
    v.displacements.push_back(static_cast<int>(offset));
  }
  return v;
}

}  // namespace

std::shared_ptr<Operation> all_reduce(Communicator& comm, const DLTensor* send, DLTensor* recv, int32_t op) {
  const std::string call = call_of(comm, "all_reduce");
  const View s = view_of(send, "send", call);
  const View r = view_of(recv, "recv", call);
  expect_same_dtype(s, r, call);
  if (s.numel != r.numel)
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": send has " + std::to_string(s.numel) +
                                              " elements but recv has " + std::to_string(r.numel) + " (" +
                                              dtype_name(s.dtype) + "; all_reduce needs equal sizes)");
  const Reduction reduction = reduction_for(*comm.runtime(), s.dtype, op, call);
  const bool in_place = s.data == r.data;
  if (!in_place && s.overlaps(r))
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": send and recv overlap without being the same buffer");
  auto operation = operation_named("all_reduce");
  const int64_t chunk = comm.chunk_elements();
  operation->start = [s, r, reduction, in_place, chunk](MPI_Comm mpi, std::vector<MPI_Request>& requests) {
    in_chunks(r.numel, chunk, [&](int64_t first, int count) {
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Iallreduce(in_place ? MPI_IN_PLACE : s.at(first), r.at(first), count, reduction.type,
                               reduction.op, mpi, &request),
                "MPI_Iallreduce");
      requests.push_back(request);
    });
  };
  if (reduction.average) operation->finish = [r, size = comm.size()] { divide(r, size); };
  return comm.submit(operation);
}

std::shared_ptr<Operation> all_gather(Communicator& comm, const DLTensor* send, DLTensor* recv) {
  const std::string call = call_of(comm, "all_gather");
  const View s = view_of(send, "send", call);
  const View r = view_of(recv, "recv", call);
  expect_same_dtype(s, r, call);
  if (r.numel != s.numel * comm.size())
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": recv has " + std::to_string(r.numel) +
                                              " elements but must hold " + std::to_string(comm.size()) +
                                              " x send = " + std::to_string(s.numel * comm.size()) + " (" +
                                              dtype_name(s.dtype) + ")");
  expect_int_count(s.numel, "elements per rank", call);
  const bool in_place = s.numel > 0 && s.data == r.at(s.numel * comm.rank());
  if (!in_place && s.overlaps(r))
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": send overlaps recv without being this rank's slot of it");
  const MPI_Datatype type = comm.runtime()->element_type(s.element_size);
  auto operation = operation_named("all_gather");
  operation->start = [s, r, type, in_place](MPI_Comm mpi, std::vector<MPI_Request>& requests) {
    MPI_Request request = MPI_REQUEST_NULL;
    const int count = static_cast<int>(s.numel);
    check_mpi(
        MPI_Iallgather(in_place ? MPI_IN_PLACE : s.data, count, type, r.data, count, type, mpi, &request),
        "MPI_Iallgather");
    requests.push_back(request);
  };
  return comm.submit(operation);
}

std::shared_ptr<Operation> reduce_scatter(Communicator& comm, const DLTensor* send, DLTensor* recv,
                                          int32_t op) {
  const std::string call = call_of(comm, "reduce_scatter");
  const View s = view_of(send, "send", call);
  const View r = view_of(recv, "recv", call);
  expect_same_dtype(s, r, call);
  if (s.numel != r.numel * comm.size())
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": send has " + std::to_string(s.numel) +
                                              " elements but must hold " + std::to_string(comm.size()) +
                                              " x recv = " + std::to_string(r.numel * comm.size()) + " (" +
                                              dtype_name(s.dtype) + ")");
  expect_int_count(r.numel, "elements per rank", call);
  const Reduction reduction = reduction_for(*comm.runtime(), s.dtype, op, call);
  if (s.overlaps(r))
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": send and recv overlap (use separate buffers)");
  auto operation = operation_named("reduce_scatter");
  operation->start = [s, r, reduction](MPI_Comm mpi, std::vector<MPI_Request>& requests) {
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Ireduce_scatter_block(s.data, r.data, static_cast<int>(r.numel), reduction.type,
                                        reduction.op, mpi, &request),
              "MPI_Ireduce_scatter_block");
    requests.push_back(request);
  };
  if (reduction.average) operation->finish = [r, size = comm.size()] { divide(r, size); };
  return comm.submit(operation);
}

std::shared_ptr<Operation> all_to_all_v(Communicator& comm, const DLTensor* send, const int64_t* send_counts,
                                        const int64_t* send_offsets, DLTensor* recv,
                                        const int64_t* recv_counts, const int64_t* recv_offsets) {
  const std::string call = call_of(comm, "all_to_all_v");
  const View s = view_of(send, "send", call);
  const View r = view_of(recv, "recv", call);
  expect_same_dtype(s, r, call);
  auto sv = std::make_shared<VCounts>(checked_counts(comm, send_counts, send_offsets, s, "send", call));
  auto rv = std::make_shared<VCounts>(checked_counts(comm, recv_counts, recv_offsets, r, "recv", call));
  if (s.overlaps(r))
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": send and recv overlap (use separate buffers)");
  const MPI_Datatype type = comm.runtime()->element_type(s.element_size);
  auto operation = operation_named("all_to_all_v");
  // The count arrays live in the operation until MPI has completed it, as MPI requires.
  operation->start = [s, r, sv, rv, type](MPI_Comm mpi, std::vector<MPI_Request>& requests) {
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Ialltoallv(s.data, sv->counts.data(), sv->displacements.data(), type, r.data,
                             rv->counts.data(), rv->displacements.data(), type, mpi, &request),
              "MPI_Ialltoallv");
    requests.push_back(request);
  };
  return comm.submit(operation);
}

std::shared_ptr<Operation> broadcast(Communicator& comm, DLTensor* buffer, int32_t root) {
  const std::string call = call_of(comm, "broadcast");
  const View b = view_of(buffer, "buffer", call);
  if (root < 0 || root >= comm.size())
    throw Error(PLX_ERR_INVALID_ARGUMENT, call + ": root " + std::to_string(root) +
                                              " is not a rank of this communicator (ranks 0.." +
                                              std::to_string(comm.size() - 1) + ")");
  const MPI_Datatype type = comm.runtime()->element_type(b.element_size);
  auto operation = operation_named("broadcast");
  const int64_t chunk = comm.chunk_elements();
  operation->start = [b, type, root, chunk](MPI_Comm mpi, std::vector<MPI_Request>& requests) {
    in_chunks(b.numel, chunk, [&](int64_t first, int count) {
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Ibcast(b.at(first), count, type, root, mpi, &request), "MPI_Ibcast");
      requests.push_back(request);
    });
  };
  return comm.submit(operation);
}

std::shared_ptr<Operation> send(Communicator& comm, const DLTensor* buffer, int32_t peer, int32_t tag) {
  const std::string call = call_of(comm, "send to rank " + std::to_string(peer));
  const View b = view_of(buffer, "buffer", call);
  check_peer(comm, peer, tag, call);
  const MPI_Datatype type = comm.runtime()->element_type(b.element_size);
  auto operation = operation_named("send");
  operation->collective = false;
  operation->peer = peer;
  operation->tag = tag;
  const int64_t chunk = comm.chunk_elements();
  operation->start = [b, type, peer, tag, chunk](MPI_Comm mpi, std::vector<MPI_Request>& requests) {
    in_chunks(b.numel, chunk, [&](int64_t first, int count) {
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Isend(b.at(first), count, type, peer, tag, mpi, &request), "MPI_Isend");
      requests.push_back(request);
    });
  };
  return comm.submit(operation);
}

std::shared_ptr<Operation> recv(Communicator& comm, DLTensor* buffer, int32_t peer, int32_t tag) {
  const std::string call = call_of(comm, "recv from rank " + std::to_string(peer));
  const View b = view_of(buffer, "buffer", call);
  check_peer(comm, peer, tag, call);
  const MPI_Datatype type = comm.runtime()->element_type(b.element_size);
  auto operation = operation_named("recv");
  operation->collective = false;
  operation->peer = peer;
  operation->tag = tag;
  const int64_t chunk = comm.chunk_elements();
  operation->start = [b, type, peer, tag, chunk](MPI_Comm mpi, std::vector<MPI_Request>& requests) {
    in_chunks(b.numel, chunk, [&](int64_t first, int count) {
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Irecv(b.at(first), count, type, peer, tag, mpi, &request), "MPI_Irecv");
      requests.push_back(request);
    });
  };
  // MPI accepts a shorter message into a larger buffer; a size mismatch is an error here.
  Operation* self = operation.get();
  operation->finish = [self, b, type] {
    int64_t received = 0;
    for (const MPI_Status& status : self->statuses) {
      int count = 0;
      MPI_Get_count(&status, type, &count);
      received += count;
    }
    if (received != b.numel)
      throw Error(PLX_ERR_INVALID_ARGUMENT, "received " + std::to_string(received) +
                                                " elements into a buffer of " + std::to_string(b.numel) +
                                                " (" + dtype_name(b.dtype) +
                                                "): the sizes of send and recv must match");
  };
  return comm.submit(operation);
}

std::shared_ptr<Operation> barrier(Communicator& comm) {
  auto operation = operation_named("barrier");
  operation->start = [](MPI_Comm mpi, std::vector<MPI_Request>& requests) {
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Ibarrier(mpi, &request), "MPI_Ibarrier");
    requests.push_back(request);
  };
  return comm.submit(operation);
}

std::shared_ptr<Operation> split(Communicator& comm, int32_t color, int32_t key,
                                 std::shared_ptr<SplitResult> result) {
  struct Exchange {
    std::array<int32_t, 2> mine{};
    std::vector<int32_t> all;
  };
  auto exchange = std::make_shared<Exchange>();
  exchange->mine = {color, key};
  exchange->all.resize(2 * static_cast<std::size_t>(comm.size()));
  auto operation = operation_named("split");
  operation->start = [exchange](MPI_Comm mpi, std::vector<MPI_Request>& requests) {
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Iallgather(exchange->mine.data(), 2, MPI_INT32_T, exchange->all.data(), 2, MPI_INT32_T, mpi,
                             &request),
              "MPI_Iallgather");
    requests.push_back(request);
  };
  operation->finish = [exchange, result, color, key, mpi = comm.mpi_comm()] {
    check_mpi(MPI_Comm_split(mpi, color < 0 ? MPI_UNDEFINED : color, key, &result->comm), "MPI_Comm_split");
    if (result->comm != MPI_COMM_NULL)
      check_mpi(MPI_Comm_dup(result->comm, &result->probe_comm), "MPI_Comm_dup");
  };
  return comm.submit(operation);
}

}  // namespace plexus::comm_mpi::ops
