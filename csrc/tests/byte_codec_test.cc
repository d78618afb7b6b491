// The little-endian byte codec every wire layout uses: exact bytes for each width, signed and floating
// values, round trips, appends, and arrays.
#include <cstdio>
#include <string>
#include <vector>

#include "common/byte_codec.h"
#include "tests/check.h"

using namespace phv;
using namespace phv::testing;

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  uint8_t b[8] = {0};
  store_le<uint16_t>(b, 0x0102);
  CHECK(b[0] == 0x02 && b[1] == 0x01);
  store_le<uint32_t>(b, 0x4d564850);  // "PHVM"
  CHECK(std::string(reinterpret_cast<char*>(b), 4) == "PHVM");
  store_le<uint64_t>(b, 0x0807060504030201ull);
  for (int i = 0; i < 8; ++i) CHECK(b[i] == i + 1);
  CHECK(load_le<uint64_t>(b) == 0x0807060504030201ull);
  CHECK(load_le<uint32_t>(b + 4) == 0x08070605u);
  CHECK(load_le<uint16_t>(b + 6) == 0x0807);
  store_le<int64_t>(b, -2);
  CHECK(b[0] == 0xfe && b[7] == 0xff && load_le<int64_t>(b) == -2);
  store_le<int32_t>(b, -123456);
  CHECK(load_le<int32_t>(b) == -123456);
  store_le<double>(b, 1.0);  // IEEE 754: 0x3ff0000000000000
  CHECK(b[7] == 0x3f && b[6] == 0xf0 && b[0] == 0 && load_le<double>(b) == 1.0);
  store_le<uint8_t>(b, 0xab);
  CHECK(b[0] == 0xab && load_le<uint8_t>(b) == 0xab);

  std::string s;
  append_le<uint32_t>(s, 7);
  append_le<int64_t>(s, -1);
  CHECK(s == std::string("\x07\0\0\0", 4) + std::string(8, '\xff'));
  std::vector<uint8_t> v;
  append_le<uint16_t>(v, 0xbeef);
  append_le<float>(v, 2.5f);
  CHECK(v.size() == 6 && v[0] == 0xef && v[1] == 0xbe && load_le<float>(v.data() + 2) == 2.5f);

  const int64_t values[3] = {1, -1, int64_t(1) << 40};
  uint8_t arr[24];
  store_le_array(arr, values, 3);
  CHECK(arr[0] == 1 && arr[8] == 0xff && arr[16 + 5] == 1 && load_le<int64_t>(arr + 16) == values[2]);
  int64_t back[3] = {0, 0, 0};
  load_le_array(back, arr, 3);
  CHECK(back[0] == 1 && back[1] == -1 && back[2] == values[2]);
  return finish("byte_codec_test");
}
