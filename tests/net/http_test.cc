#include "net/http.h"

#include <gtest/gtest.h>

#include <string>

namespace infera::net {
namespace {

TEST(UnsafePathReasonTest, AcceptsPlainPaths) {
  EXPECT_EQ(unsafePathReason("/v1/chat/completions"), "");
  EXPECT_EQ(unsafePathReason("/v2/models/kecho-a/versions/3/infer"), "");
  EXPECT_EQ(unsafePathReason("/v1/models/llama%2D3"), "");  // an encoded unreserved character
}

TEST(UnsafePathReasonTest, RefusesDotSegmentsPlainOrEncoded) {
  EXPECT_NE(unsafePathReason("/v2/models/kecho-a/../kecho-b/infer"), "");
  EXPECT_NE(unsafePathReason("/v1/%2e%2e/admin/keys"), "");
  EXPECT_NE(unsafePathReason("/v1/./models"), "");
}

TEST(UnsafePathReasonTest, RefusesEncodedSlashesAndBackslashes) {
  EXPECT_NE(unsafePathReason("/v2/models/a%2Fb/infer"), "");
  EXPECT_NE(unsafePathReason("/v2/models/a%5cb/infer"), "");
  EXPECT_NE(unsafePathReason("/v2/models/a\\b/infer"), "");
}

// Found by tests/fuzz (corpus/path/raw_nul): a raw NUL (or any control byte) inside a segment was
// accepted, so a backend reading the path as a C string routed a shorter one than the router saw.
TEST(UnsafePathReasonTest, RefusesRawControlCharactersAndSpace) {
  EXPECT_NE(unsafePathReason(std::string("/v2/models/llama\0/infer", 23)), "");
  EXPECT_NE(unsafePathReason("/v1/models/a\x13"), "");
  EXPECT_NE(unsafePathReason("/v1/models/a b"), "");
  EXPECT_NE(unsafePathReason("/v1/models/a\x7f"), "");
  EXPECT_NE(unsafePathReason("/v1/models/a%00"), "");
}

}  // namespace
}  // namespace infera::net
