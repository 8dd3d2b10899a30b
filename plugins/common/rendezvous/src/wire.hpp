// The rendezvous protocol's two messages. Integers are big-endian; every message starts with a
// magic number and a version, so a stray connection (a port scanner, a job speaking another
// protocol, a different Plexus version) is recognized instead of misread.
//
//   hello (peer -> rank 0):  magic u32 | version u16 | 0 u16 | rank i32 | world_size i32 |
//                            tag_length u32 | tag bytes
//   reply (rank 0 -> peer):  magic u32 | version u16 | status u16 | length u32 | bytes
//                            (the blob when status is ok, otherwise rank 0's error message)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace plexus::rendezvous::detail {

inline constexpr uint32_t kMagic = 0x504c5852u;  // "PLXR"
inline constexpr uint16_t kVersion = 1;
inline constexpr std::size_t kHelloHeaderBytes = 20;
inline constexpr std::size_t kReplyHeaderBytes = 12;
inline constexpr std::size_t kMaxMessageBytes = 64 * 1024;  // a refusal's text

struct Hello {
  int32_t rank = 0;
  int32_t world_size = 0;
  std::string tag;
};

enum class ReplyStatus : uint16_t { ok = 0, refused = 1, timed_out = 2 };

struct ReplyHeader {
  ReplyStatus status = ReplyStatus::ok;
  uint32_t length = 0;
};

std::vector<uint8_t> encode_hello(const Hello& hello);

// Parses the bytes received so far: `incomplete` until the whole hello is there; `invalid` (with
// `why`) for bytes that are not a hello of this version.
enum class Parse { incomplete, complete, invalid };
Parse parse_hello(const std::vector<uint8_t>& bytes, Hello& out, std::string& why);

std::vector<uint8_t> encode_reply(ReplyStatus status, const uint8_t* data, std::size_t size);
// False (with `why`) unless the 12 bytes are a reply header of this version.
bool parse_reply_header(const uint8_t* bytes, ReplyHeader& out, std::string& why);

}  // namespace plexus::rendezvous::detail
