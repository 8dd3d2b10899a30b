#include "wire.hpp"

#include "plexus_rendezvous/rendezvous.hpp"

namespace plexus::rendezvous::detail {
namespace {

void put_u16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}
void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}
uint16_t get_u16(const uint8_t* p) {
  return static_cast<uint16_t>((p[0] << 8) | p[1]);
}
uint32_t get_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The magic and version every message starts with; false (with `why`) when they do not match.
bool check_preamble(const uint8_t* p, std::string& why) {
  if (get_u32(p) != kMagic) {
    why = "not a Plexus rendezvous message";
    return false;
  }
  if (get_u16(p + 4) != kVersion) {
    why = "rendezvous protocol version " + std::to_string(get_u16(p + 4)) + " (this one speaks " +
          std::to_string(kVersion) + ")";
    return false;
  }
  return true;
}

}  // namespace

std::vector<uint8_t> encode_hello(const Hello& hello) {
  std::vector<uint8_t> out;
  out.reserve(kHelloHeaderBytes + hello.tag.size());
  put_u32(out, kMagic);
  put_u16(out, kVersion);
  put_u16(out, 0);
  put_u32(out, static_cast<uint32_t>(hello.rank));
  put_u32(out, static_cast<uint32_t>(hello.world_size));
  put_u32(out, static_cast<uint32_t>(hello.tag.size()));
  out.insert(out.end(), hello.tag.begin(), hello.tag.end());
  return out;
}

Parse parse_hello(const std::vector<uint8_t>& bytes, Hello& out, std::string& why) {
  if (bytes.size() >= 6 && !check_preamble(bytes.data(), why)) return Parse::invalid;
  if (bytes.size() < kHelloHeaderBytes) return Parse::incomplete;
  const uint32_t tag_length = get_u32(bytes.data() + 16);
  if (tag_length > kMaxTagBytes) {
    why = "a job tag of " + std::to_string(tag_length) + " bytes (at most " + std::to_string(kMaxTagBytes) +
          ")";
    return Parse::invalid;
  }
  if (bytes.size() < kHelloHeaderBytes + tag_length) return Parse::incomplete;
  if (bytes.size() > kHelloHeaderBytes + tag_length) {
    why = "more bytes than a hello";
    return Parse::invalid;
  }
  out.rank = static_cast<int32_t>(get_u32(bytes.data() + 8));
  out.world_size = static_cast<int32_t>(get_u32(bytes.data() + 12));
  out.tag.assign(bytes.begin() + kHelloHeaderBytes, bytes.end());
  return Parse::complete;
}

std::vector<uint8_t> encode_reply(ReplyStatus status, const uint8_t* data, std::size_t size) {
  std::vector<uint8_t> out;
  out.reserve(kReplyHeaderBytes + size);
  put_u32(out, kMagic);
  put_u16(out, kVersion);
  put_u16(out, static_cast<uint16_t>(status));
  put_u32(out, static_cast<uint32_t>(size));
  out.insert(out.end(), data, data + size);
  return out;
}

bool parse_reply_header(const uint8_t* bytes, ReplyHeader& out, std::string& why) {
  if (!check_preamble(bytes, why)) return false;
  const uint16_t status = get_u16(bytes + 6);
  if (status > static_cast<uint16_t>(ReplyStatus::timed_out)) {
    why = "an unknown reply status " + std::to_string(status);
    return false;
  }
  out.status = static_cast<ReplyStatus>(status);
  out.length = get_u32(bytes + 8);
  const std::size_t limit = out.status == ReplyStatus::ok ? kMaxBlobBytes : kMaxMessageBytes;
  if (out.length > limit) {
    why = "a reply of " + std::to_string(out.length) + " bytes (at most " + std::to_string(limit) + ")";
    return false;
  }
  return true;
}

}  // namespace plexus::rendezvous::detail
