// The TensorBoard event writer's framing (framework/src/engine/tensorboard_writer.cpp): CRC-32C
// against its published check value, and a file whose records carry the lengths and masked CRCs
// TFRecord readers verify. Reading the events back with TensorBoard itself:
// tests/integration/test_tensorboard.cpp.
#define BOOST_TEST_MODULE tensorboard_writer
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "engine/tensorboard_writer.hpp"
#include "temp_dir.hpp"

namespace tb = plexus::tensorboard_detail;

BOOST_AUTO_TEST_CASE(crc32c_has_its_check_value) {
  BOOST_TEST(tb::crc32c("123456789") == 0xE3069283u);  // the CRC-32C check value (RFC 3720)
  BOOST_TEST(tb::crc32c("") == 0u);
  BOOST_TEST(tb::masked_crc32c("") == 0xA282EAD8u);  // rotate 0 by 15, plus the mask constant
}

// Every record: uint64 length, its masked CRC, the data, the data's masked CRC; the file is
// exactly a sequence of them (the version event, two scalars and a text).
BOOST_AUTO_TEST_CASE(records_are_framed_with_verifiable_checksums) {
  plexus::test::TempDir dir;
  std::filesystem::path file;
  {
    plexus::TensorBoardWriter writer(dir.path() / "logs");
    writer.scalar("loss", 1, 2.5);
    writer.write_record(boost::json::object{{"event", "step"}, {"step", 2}, {"lr", 0.001}, {"name", "x"}});
    writer.text("sample", 2, "text \xff end");  // not UTF-8: written as U+FFFD
    file = writer.file();
  }
  BOOST_TEST(file.filename().string().starts_with("events.out.tfevents."));
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t at = 0, count = 0;
  while (at < bytes.size()) {
    BOOST_TEST_REQUIRE(at + 12 <= bytes.size());
    uint64_t length = 0;
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&length, bytes.data() + at, 8);
    std::memcpy(&length_crc, bytes.data() + at + 8, 4);
    BOOST_TEST(length_crc == tb::masked_crc32c(std::string_view(bytes.data() + at, 8)));
    BOOST_TEST_REQUIRE(at + 12 + length + 4 <= bytes.size());
    const std::string_view data(bytes.data() + at + 12, length);
    std::memcpy(&data_crc, bytes.data() + at + 12 + length, 4);
    BOOST_TEST(data_crc == tb::masked_crc32c(data));
    at += 12 + length + 4;
    ++count;
  }
  BOOST_TEST(at == bytes.size());
  BOOST_TEST(count == 4u);  // version, loss, lr (the string field is left out), sample
  BOOST_TEST(bytes.find("brain.Event:2") != std::string::npos);
  BOOST_TEST(bytes.find("\xef\xbf\xbd") != std::string::npos);
}
