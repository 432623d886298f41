#pragma once
// TLS settings of the HTTP server (a listening port) and of the upstream client (an https://
// endpoint), and the loaded contexts built from them. OpenSSL through Asio's ssl::stream; no
// OpenSSL or Asio type appears here (the contexts are opaque, defined in net/internal/tls.h).
//
//   net::ServerConfig sc;
//   sc.tls = net::TlsServerConfig{.cert_file = "server.pem", .key_file = "server.key"};
//   auto server = net::HttpServer::create(loops, sc, factory);   // loads the files
//   (*server)->reloadTls(*sc.tls);                               // e.g. on SIGHUP
//   auto up = net::resolveUrl("https://backend:8443", {.ca_file = "ca.pem"});
//
// Both sides speak TLS 1.2 and 1.3 only, and HTTP/1.1 (ALPN "http/1.1"; a client offering only
// other protocols is refused). Loading reads files: call off the event loops. A loaded context is
// immutable and may be shared by every loop (OpenSSL's SSL_CTX is thread-safe for that use).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace infera {
class ConfigReader;
}

namespace infera::net {

// A listening port's certificate. `cert_file` is a PEM chain (leaf first), `key_file` its PEM
// private key; with `client_ca_file` set, clients must present a certificate signed by one of
// its CAs (mutual TLS).
struct TlsServerConfig {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;  // "" = no client certificates asked for
  // How often the server looks at the three files' modification times (and size, inode) and
  // reloads them when they change; 0 = only on an explicit reload.
  std::chrono::milliseconds watch_interval{5'000};
  bool operator==(const TlsServerConfig&) const = default;
};

// An https:// upstream. With `verify` (the default) the server's chain must lead to `ca_file`'s
// CAs, or to the system store (/etc/ssl/certs, or SSL_CERT_FILE / SSL_CERT_DIR) when ca_file is
// empty, and its certificate must name the host: `server_name` when set, else the URL's host (a
// DNS name, or an IP address matched against the certificate's IP SANs). The same name is sent as
// SNI (not for IP addresses, RFC 6066). `cert_file` + `key_file`: a client certificate (mTLS).
struct TlsClientConfig {
  bool verify = true;
  std::string ca_file;
  std::string server_name;
  std::string cert_file;
  std::string key_file;
  bool operator==(const TlsClientConfig&) const = default;
};

class TlsServerContext;  // net/internal/tls.h
class TlsClientContext;

// What a loaded server certificate says (logs, metrics, tests).
struct TlsCertificateInfo {
  std::string subject;
  std::string serial;       // hex, upper case, as `openssl x509 -serial` prints it
  int64_t not_after_s = 0;  // unix seconds
};

// Loads and checks the certificate chain, the key (it must match the certificate), the client CA
// file, and that the certificate has not expired. kInvalidArgument naming the file and OpenSSL's
// reason otherwise. Blocking (reads files).
Result<std::shared_ptr<const TlsServerContext>> loadServerTls(const TlsServerConfig& config);
TlsCertificateInfo certificateInfo(const TlsServerContext& context);

// Builds an upstream context (CA store, client certificate). kInvalidArgument on a file that does
// not load. Blocking (reads files).
Result<std::shared_ptr<const TlsClientContext>> makeClientTls(const TlsClientConfig& config);
// Equal for two contexts built from the same settings and the same file contents (by size and
// modification time): a pool keeps its connections when a reload rebuilds an identical context.
const std::string& clientTlsFingerprint(const TlsClientContext& context);

// The `tls:` mappings of the config file, read with core's ConfigReader (errors with key path and
// line, unknown keys rejected). The files must exist and be readable (checked here; they are
// loaded when the server starts or reloads).
//   server: {cert_file, key_file (both required), client_ca_file, watch_interval_ms}
//   client: {verify, ca_file, server_name, cert_file, key_file} read onto `out` (so a deployment's
//           settings are its endpoints' defaults); cert_file and key_file go together.
void readTlsServerConfig(ConfigReader& r, TlsServerConfig& out);
void readTlsClientConfig(ConfigReader& r, TlsClientConfig& out);

}  // namespace infera::net
