// What the host knows of each component kind: its name, the size of its function table, and
// which of the table's functions a component must provide.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace plexus::detail {

struct RequiredField {
  const char* name;
  std::size_t end;  // offset just past the field: a table's struct_size must reach it
};

struct KindInfo {
  uint32_t kind;
  const char* name;
  std::size_t table_size;               // sizeof the table in this host
  std::vector<RequiredField> required;  // non-NULL pointers every component must provide
};

const KindInfo* kind_info(uint32_t kind) noexcept;
std::string known_kinds_list();  // "layer (1), fusion_backend (2), ..."

}  // namespace plexus::detail
