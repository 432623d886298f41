#include "gateway/internal/usage_scan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace infera::gateway {
namespace {

struct Read {
  bool seen;
  int64_t prompt;
  int64_t completion;
};

Read read(const std::string& body) {
  UsageScan s;
  readUsage(s, body);
  return {s.seen, s.prompt, s.completion};
}

void expectRead(const std::string& body, Read want) {
  const Read got = read(body);
  EXPECT_EQ(got.seen, want.seen) << body;
  EXPECT_EQ(got.prompt, want.prompt) << body;
  EXPECT_EQ(got.completion, want.completion) << body;
}

// The shape backends write (usage last, plain counts) and its near misses, each of which the
// narrower walk hands to the general one: the reading is the same either way.
TEST(UsageScanTest, ReadsTheUsageBackendsWriteAndEveryNearMissAlike) {
  const std::string head = R"({"id":"c","choices":[{"message":{"content":"x"}}],)";
  expectRead(head + R"("usage":{"prompt_tokens":12,"total_tokens":28,"completion_tokens":16}})",
             {true, 12, 16});
  expectRead(head + R"("usage":{"prompt_tokens":12,"completion_tokens":16}})"
                    "\n",
             {true, 12, 16});
  expectRead(head + R"("usage":{"prompt_tokens":12,"total_tokens":28}})", {true, 12, 16});
  // Spaces, another key, a nested object, a negative or fractional count: the general walk.
  expectRead(head + R"("usage": {"prompt_tokens": 12, "completion_tokens": 16} })", {true, 12, 16});
  expectRead(head + R"("usage":{"prompt_tokens":12,"cached":3,"completion_tokens":16}})",
             {true, 12, 16});
  expectRead(head + R"("usage":{"prompt_tokens":12,"completion_tokens":16,"details":{"a":1}}})",
             {true, 12, 16});
  expectRead(head + R"("usage":{"prompt_tokens":-1,"completion_tokens":16}})", {false, 0, 0});
  expectRead(head + R"("usage":{"prompt_tokens":1.5,"total_tokens":4}})", {true, 0, 4});
  // A key given twice: the last, as JSON parsers read it; likewise usage given twice.
  expectRead(head + R"("usage":{"prompt_tokens":1,"prompt_tokens":7,"completion_tokens":2}})",
             {true, 7, 2});
  expectRead(R"({"usage":{"prompt_tokens":5},"usage":{"completion_tokens":2,"total_tokens":3}})",
             {true, 0, 2});
  // Quotes that are inside strings are not keys: "usage" here is the tail of a key x"usage.
  expectRead(R"({"x\"usage":{"prompt_tokens":1,"completion_tokens":2}})", {false, 0, 0});
  expectRead(R"({"a":"b\\","usage":{"prompt_tokens":1,"completion_tokens":2}})", {true, 1, 2});
  // Counts in an object that is not the top-level usage are not read.
  expectRead(R"({"x":{"usage":{"prompt_tokens":1,"completion_tokens":2}}})", {false, 0, 0});
  expectRead(R"({"notusage":{"prompt_tokens":1,"completion_tokens":2}})", {false, 0, 0});
  // Found by the fuzz target: "usage" must be a whole key, closed by its own quote.
  expectRead(R"({"usage[:{"prompt_tokens":5,"completion_tokens":7}})", {false, 0, 0});
  expectRead(R"({"x":1,"usage":{"prompt_tokens":5,"completion_tokens"x:7}})", {false, 0, 0});
  expectRead(R"({"usage":{}})", {false, 0, 0});
  expectRead(R"("usage":{"prompt_tokens":1}})", {true, 1, 0});  // not JSON: as the walk reads it
  expectRead(R"(}})", {false, 0, 0});
  expectRead(R"(1}})", {false, 0, 0});
  expectRead(R"(":1}})", {false, 0, 0});
}

}  // namespace
}  // namespace infera::gateway
