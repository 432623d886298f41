#pragma once
// The web console: an HTML page, its ES modules and its style sheet, embedded in the binary at
// build time (assets/, cmake infera_embed) and served on the admin port under /ui. The console
// holds no data and has no endpoint of its own: the page asks for a token and drives the
// documented admin API with it, like the CLI (docs/console.md).
//
//   net::Router admin;
//   console::addAdminRoutes(admin);     // GET /ui, /ui/, /ui/{asset}
//
// The assets are served without the admin token (the login page must load before the user has
// given one; nothing in them is secret), each with its content type, an ETag (304 on a match)
// with `cache-control: no-cache` (the browser revalidates: a new binary's assets are never
// stale), a Content-Security-Policy that allows only this origin's scripts, styles and API, and
// nosniff / no-referrer / no-framing headers.
//
// Thread-safety: addAdminRoutes is called once per admin loop while its router is built; the
// routes it adds only read immutable tables.

#include <string_view>
#include <vector>

namespace infera::net {
class Router;
}

namespace infera::console {

struct Asset {
  std::string_view path;  // under /ui/: "index.html", "app.js", "pages/keys.js", ...
  std::string_view content_type;
  std::string_view body;
};

// Every embedded asset (the page is "index.html").
std::vector<Asset> assets();

// The Content-Security-Policy every console answer carries.
std::string_view contentSecurityPolicy();

// Registers GET/HEAD /ui, /ui/ (the page) and /ui/{path...} (an asset; 404 for another path).
void addAdminRoutes(net::Router& admin);

}  // namespace infera::console
