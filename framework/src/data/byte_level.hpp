// GPT-2's byte-level alphabet, shared by every byte-level BPE (GPT-2, Llama 3, Hugging Face's
// ByteLevel pre-tokenizer and decoder): each of the 256 byte values is shown as one printable
// character, so a token's bytes can be written as a JSON string. The bytes '!'..'~', U+00A1..
// U+00AC and U+00AE..U+00FF stand for themselves; the other 68 (controls, space, U+00AD) take
// U+0100, U+0101, ... in byte order: space is U+0120 'Ġ', '\n' is U+010A 'Ċ'.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace plexus::data::byte_level {

// The character standing for `byte`.
char32_t char_of(unsigned char byte) noexcept;
// The byte a character stands for, if it is one of the 256.
std::optional<unsigned char> byte_of(char32_t code_point) noexcept;

// Raw bytes -> their characters, UTF-8 encoded (a token string of tokenizer.json).
std::string to_token_string(std::string_view bytes);
// A token string -> the raw bytes, or nullopt if a character is not of the alphabet (or the
// string is not UTF-8).
std::optional<std::string> to_bytes(std::string_view token_string);

// UTF-8 encoding of one code point (<= U+10FFFF).
void append_utf8(std::string& out, char32_t cp);

}  // namespace plexus::data::byte_level
