// MPI's initialization and finalization for the whole process, and the datatypes and reduction
// operators every communicator shares.
#include "runtime.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <string>

#include "bf16.hpp"
#include "plexus/cpp/error.hpp"

namespace plexus::comm_mpi {
namespace {

using plexus::sdk::Error;

// The plugin host opens plugins RTLD_LOCAL, so libmpi (a dependency of this plugin) is loaded
// with local symbol scope. Open MPI loads its components (transports, collectives) as DSOs with
// dlopen; built as most distributions build them, they expect libmpi's and libopen-pal's
// symbols in the global scope and fail to load otherwise ("undefined symbol: ompi_..."), which
// makes MPI_Init fail. Reopening the already loaded library with RTLD_GLOBAL | RTLD_NOLOAD
// promotes it and its dependencies to the global scope without loading anything new.
void promote_mpi_library_to_global_scope() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&MPI_Init_thread), &info) != 0 && info.dli_fname != nullptr) {
    if (dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) != nullptr) return;
  }
  // The name of Open MPI 4's library, for a libmpi that dladdr could not name.
  if (dlopen("libmpi.so.40", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) != nullptr) return;
  dlopen("libmpi.so.40", RTLD_NOW | RTLD_GLOBAL);  // best effort: MPI_Init reports what is missing
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
    default:
      return "an unknown thread level";
  }
}

template <class Combine>
void bf16_combine(void* in, void* inout, int* len, Combine combine) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(combine(bf16_to_float(a[i]), bf16_to_float(b[i])));
}
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_combine(in, inout, len, [](float x, float y) { return x + y; });
}
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_combine(in, inout, len, [](float x, float y) { return std::max(x, y); });
}
void bf16_min(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_combine(in, inout, len, [](float x, float y) { return std::min(x, y); });
}

std::mutex& runtime_mutex() {
  static std::mutex m;
  return m;
}
std::weak_ptr<Runtime>& current_runtime() {
  static std::weak_ptr<Runtime> runtime;
  return runtime;
}

}  // namespace

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

void check_mpi(int code, const std::string& what) {
  if (code != MPI_SUCCESS) throw Error(PLX_ERR_COMM, what + ": " + mpi_error_text(code));
}

std::shared_ptr<Runtime> Runtime::acquire() {
  std::lock_guard lock(runtime_mutex());
  if (auto running = current_runtime().lock()) return running;

  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0)
    throw Error(PLX_ERR_UNSUPPORTED,
                "MPI was already finalized in this process and cannot be initialized again: keep the world "
                "communicator for the life of the process (MPI_Finalize runs when its last communicator is "
                "destroyed)");
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized == 0) {
    promote_mpi_library_to_global_scope();
    const int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (code != MPI_SUCCESS) throw Error(PLX_ERR_COMM, "MPI_Init_thread failed: " + mpi_error_text(code));
  } else {
    MPI_Query_thread(&provided);
  }
  // Constructed before the thread-level check, so an MPI this plugin initialized is finalized.
  std::shared_ptr<Runtime> runtime(new Runtime(initialized == 0));
  if (provided < MPI_THREAD_MULTIPLE)
    throw Error(PLX_ERR_UNSUPPORTED, std::string("this MPI provides ") + thread_level_name(provided) +
                                         "; the mpi backend needs MPI_THREAD_MULTIPLE (its worker thread and "
                                         "the waiting threads call MPI concurrently)");
  current_runtime() = runtime;
  return runtime;
}

Runtime::Runtime(bool initialized_here) : initialized_here_(initialized_here) {
  void* value = nullptr;
  int found = 0;
  if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &found) == MPI_SUCCESS && found != 0 &&
      value != nullptr)
    tag_ub_ = *static_cast<int*>(value);
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(version, &length) == MPI_SUCCESS) {
    library_.assign(version, static_cast<std::size_t>(length));
    library_ = library_.substr(0, library_.find_first_of(",\n"));
  }
  MPI_Op_create(&bf16_sum, 1, &bf16_sum_);
  MPI_Op_create(&bf16_max, 1, &bf16_max_);
  MPI_Op_create(&bf16_min, 1, &bf16_min_);
}

Runtime::~Runtime() {
  if (unclean_) return;  // requests left in flight: finalizing could block on them
  for (auto& [bytes, type] : types_) MPI_Type_free(&type);
  for (MPI_Op* op : {&bf16_sum_, &bf16_max_, &bf16_min_})
    if (*op != MPI_OP_NULL) MPI_Op_free(op);
  if (initialized_here_) MPI_Finalize();
}

MPI_Datatype Runtime::element_type(std::size_t bytes) {
  switch (bytes) {
    case 1:
      return MPI_BYTE;
    case 2:
      return MPI_UINT16_T;
    case 4:
      return MPI_UINT32_T;
    case 8:
      return MPI_UINT64_T;
    default:
      break;
  }
  std::lock_guard lock(types_mutex_);
  auto it = types_.find(bytes);
  if (it != types_.end()) return it->second;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  check_mpi(MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &type), "MPI_Type_contiguous");
  check_mpi(MPI_Type_commit(&type), "MPI_Type_commit");
  types_.emplace(bytes, type);
  return type;
}

MPI_Op Runtime::bf16_op(int32_t reduce) const noexcept {
  switch (reduce) {
    case PLX_REDUCE_MAX:
      return bf16_max_;
    case PLX_REDUCE_MIN:
      return bf16_min_;
    default:
      return bf16_sum_;
  }
}

}  // namespace plexus::comm_mpi
