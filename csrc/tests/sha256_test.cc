// SHA-256 against FIPS 180-4 examples, HMAC-SHA256 against RFC 4231 test cases 1-4, 6, 7.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/sha256.h"
#include "tests/check.h"

namespace {
using phv::testing::expect;

void expect_hex(const char* what, const phv::Digest& got, const char* want) {
  std::string hex = phv::to_hex(got.data(), got.size());
  expect(hex == want, what, hex + "\n     want: " + want);
}

phv::Digest sha(const std::string& s) { return phv::sha256(s.data(), s.size()); }
}  // namespace

int main() {
  expect_hex("sha256 empty", sha(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  expect_hex("sha256 abc", sha("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  expect_hex("sha256 448 bits", sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
             "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  expect_hex("sha256 896 bits",
             sha("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                 "mnopqrstnopqrstu"),
             "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  {
    // One million 'a', fed in uneven pieces to exercise the block buffering.
    phv::Sha256 h;
    std::string piece(997, 'a');
    size_t left = 1000000;
    while (left > 0) {
      size_t n = left < piece.size() ? left : piece.size();
      h.update(piece.data(), n);
      left -= n;
    }
    expect_hex("sha256 million a", h.finish(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
  expect_hex("hmac rfc4231 tc1", phv::hmac_sha256(std::string(20, '\x0b'), "Hi There"),
             "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  expect_hex("hmac rfc4231 tc2", phv::hmac_sha256("Jefe", "what do ya want for nothing?"),
             "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  expect_hex("hmac rfc4231 tc3", phv::hmac_sha256(std::string(20, '\xaa'), std::string(50, '\xdd')),
             "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  {
    std::string key;
    for (int i = 1; i <= 25; ++i) key.push_back(char(i));
    expect_hex("hmac rfc4231 tc4", phv::hmac_sha256(key, std::string(50, '\xcd')),
               "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  }
  expect_hex("hmac rfc4231 tc6",
             phv::hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
             "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  expect_hex("hmac rfc4231 tc7",
             phv::hmac_sha256(std::string(131, '\xaa'),
                              "This is a test using a larger than block-size key and a larger than block-size data. "
                              "The key needs to be hashed before being used by the HMAC algorithm."),
             "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
  phv::Digest a = sha("x"), b = sha("x"), c = sha("y");
  expect(phv::digest_equal(a.data(), b.data(), 32) && !phv::digest_equal(a.data(), c.data(), 32), "digest_equal");
  return phv::testing::finish("sha256_test");
}
