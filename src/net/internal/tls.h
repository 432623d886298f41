#pragma once
// Private to net: the loaded TLS contexts behind net/tls.h, and what the server and the client
// do with OpenSSL per connection.

#include <openssl/ssl.h>

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <string>
#include <type_traits>

#include "net/asio.h"
#include "net/tls.h"

namespace infera::net {

using TlsStream = asio::ssl::stream<tcp::socket>;

// Code generic over the stream (plain tcp::socket or TlsStream) asks these.
template <class Stream>
constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

template <class Stream>
tcp::socket& lowestLayer(Stream& s) {
  if constexpr (kTls<Stream>) {
    return s.next_layer();
  } else {
    return s;
  }
}
template <class Stream>
const tcp::socket& lowestLayer(const Stream& s) {
  if constexpr (kTls<Stream>) {
    return s.next_layer();
  } else {
    return s;
  }
}

class TlsServerContext {
 public:
  TlsServerContext() : ssl_(asio::ssl::context::tls_server) {}
  // Non-const: ssl::stream takes a context&, though it only reads it (SSL_new).
  asio::ssl::context& ssl() const { return ssl_; }
  TlsCertificateInfo info;
  bool client_certs = false;
  std::string stamps;  // tlsFileStamps() of the files, taken before they were read

 private:
  mutable asio::ssl::context ssl_;
};

class TlsClientContext {
 public:
  TlsClientContext() : ssl_(asio::ssl::context::tls_client) {}
  asio::ssl::context& ssl() const { return ssl_; }
  TlsClientConfig config;
  std::string fingerprint;

 private:
  mutable asio::ssl::context ssl_;
};

// The last resumable session an upstream gave on one pool's connections (a pool and its
// connections live on one loop, so no lock). A new connection offers it, skipping the full
// handshake when the server still knows it.
class TlsSessionSlot {
 public:
  TlsSessionSlot() = default;
  TlsSessionSlot(const TlsSessionSlot&) = delete;
  TlsSessionSlot& operator=(const TlsSessionSlot&) = delete;
  ~TlsSessionSlot() {
    if (session_) SSL_SESSION_free(session_);
  }
  // Takes ownership of one reference.
  void set(SSL_SESSION* s) {
    if (session_) SSL_SESSION_free(session_);
    session_ = s;
  }
  SSL_SESSION* get() const { return session_; }

 private:
  SSL_SESSION* session_ = nullptr;
};

// Sets SNI, the name the certificate must carry (when verifying), the session to offer, and where
// new sessions go (`slot` may be null, then none is kept). `name` is a DNS name or an IP address.
void prepareClientSsl(SSL* ssl, const TlsClientContext& ctx, const std::string& name,
                      TlsSessionSlot* slot);
// Why a client handshake failed: the verification result when it was that, else OpenSSL's reason.
std::string clientHandshakeError(SSL* ssl, const boost::system::error_code& ec);

// OpenSSL's error queue as text (and clears it).
std::string opensslErrors();

// The inode, size and modification time of the three files (a change means a reload is due).
std::string tlsFileStamps(const TlsServerConfig& config);

}  // namespace infera::net
