// The console's embedded assets: every file the page and its modules load is in the table with
// its content type (a module missing from the embed list would be a 404 only a browser notices),
// and the policy allows no inline code and no other origin.
#include "console/console.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace infera::console {
namespace {

// "/ui/x" and './x' / '../x' references in `text`, as paths under /ui/ relative to `base`.
std::set<std::string> references(std::string_view text, const std::string& base) {
  std::set<std::string> out;
  for (const std::string_view marker : {"\"/ui/", "from './", "from '../"}) {
    size_t at = 0;
    while ((at = text.find(marker, at)) != std::string_view::npos) {
      at += marker.size();
      const size_t end = text.find_first_of("\"'", at);
      std::string ref(text.substr(at, end - at));
      if (marker == "from './") ref = base + ref;
      out.insert(ref);
    }
  }
  return out;
}

TEST(ConsoleAssetsTest, EveryReferencedFileIsEmbeddedWithItsType) {
  const auto all = assets();
  std::set<std::string> paths;
  for (const auto& a : all) {
    EXPECT_FALSE(a.body.empty()) << a.path;
    EXPECT_TRUE(paths.insert(std::string(a.path)).second) << "twice: " << a.path;
    const std::string p(a.path);
    const std::string type(a.content_type);
    std::string want;
    if (p.ends_with(".js")) want = "text/javascript; charset=utf-8";
    if (p.ends_with(".css")) want = "text/css; charset=utf-8";
    if (p.ends_with(".html")) want = "text/html; charset=utf-8";
    if (p.ends_with(".svg")) want = "image/svg+xml";
    EXPECT_EQ(type, want) << p;
  }
  ASSERT_TRUE(paths.count("index.html"));
  size_t checked = 0;
  for (const auto& a : all) {
    const std::string p(a.path);
    const std::string dir = p.find('/') == std::string::npos ? "" : p.substr(0, p.rfind('/') + 1);
    for (const auto& ref : references(a.body, dir)) {
      EXPECT_TRUE(paths.count(ref)) << p << " loads " << ref << ", which is not embedded";
      ++checked;
    }
    // No inline handlers or styles: the policy would block them.
    if (p.ends_with(".html")) {
      EXPECT_EQ(a.body.find("style="), std::string_view::npos) << p;
      EXPECT_EQ(a.body.find("onclick="), std::string_view::npos) << p;
    }
  }
  EXPECT_GE(checked, 10u) << "the pages' modules are referenced";
}

TEST(ConsoleAssetsTest, ThePolicyAllowsOnlyThisOrigin) {
  const std::string csp(contentSecurityPolicy());
  EXPECT_NE(csp.find("default-src 'none'"), std::string::npos);
  EXPECT_NE(csp.find("script-src 'self'"), std::string::npos);
  EXPECT_NE(csp.find("connect-src 'self'"), std::string::npos);
  EXPECT_NE(csp.find("frame-ancestors 'none'"), std::string::npos);
  EXPECT_EQ(csp.find("unsafe"), std::string::npos);
  EXPECT_EQ(csp.find("http"), std::string::npos);
}

}  // namespace
}  // namespace infera::console
