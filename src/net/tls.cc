#include "net/tls.h"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "core/config.h"
#include "net/internal/tls.h"

namespace infera::net {
namespace {

// "http/1.1" in ALPN's wire format (a length byte, then the name).
constexpr unsigned char kAlpnHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};

// A client that sends ALPN without http/1.1 (h2 only, say) is refused with the
// no_application_protocol alert (RFC 7301 3.2); one that sends no ALPN is served HTTP/1.1.
int selectAlpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
               unsigned int inlen, void*) {
  for (unsigned i = 0; i < inlen;) {
    const unsigned len = in[i];
    if (i + 1 + len > inlen) break;
    if (len == 8 && std::memcmp(in + i + 1, kAlpnHttp11 + 1, 8) == 0) {
      *out = in + i + 1;
      *outlen = 8;
      return SSL_TLSEXT_ERR_OK;
    }
    i += 1 + len;
  }
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

// The ex_data slot that ties a client SSL to its pool's TlsSessionSlot.
int sessionIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// TLS 1.3 sends session tickets after the handshake (inside later reads), so sessions are taken
// when OpenSSL announces them rather than right after the handshake.
int onNewSession(SSL* ssl, SSL_SESSION* session) {
  auto* slot = static_cast<TlsSessionSlot*>(SSL_get_ex_data(ssl, sessionIndex()));
  if (slot == nullptr || SSL_SESSION_is_resumable(session) != 1) return 0;
  slot->set(session);
  return 1;  // the reference is the slot's now
}

void commonOptions(SSL_CTX* ctx) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // No renegotiation (a client-driven CPU sink), no compression (CRIME); a peer that closes
  // without close_notify is an end of stream like a TCP FIN (HTTP framing catches truncation).
  SSL_CTX_set_options(
      ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
}

std::string bioText(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

TlsCertificateInfo describe(X509* cert) {
  TlsCertificateInfo info;
  if (cert == nullptr) return info;
  BIO* bio = BIO_new(BIO_s_mem());
  X509_NAME_print_ex(bio, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
  info.subject = bioText(bio);
  BIO_free(bio);
  if (BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr)) {
    if (char* hex = BN_bn2hex(bn)) {
      info.serial = hex;
      OPENSSL_free(hex);
    }
    BN_free(bn);
  }
  std::tm tm{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) == 1)
    info.not_after_s = static_cast<int64_t>(timegm(&tm));
  return info;
}

int noPassphrase(char*, int, int, void*) { return -1; }

Status loadCertificateAndKey(SSL_CTX* ctx, const std::string& cert_file,
                             const std::string& key_file) {
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1) {
    return Status::invalidArgument("cert_file " + cert_file +
                                   ": cannot load a PEM certificate chain: " + opensslErrors());
  }
  // Read here rather than by SSL_CTX_use_PrivateKey_file: OpenSSL's default passphrase callback
  // would prompt on the terminal for an encrypted key, and a mismatch gets its own message.
  FILE* f = std::fopen(key_file.c_str(), "r");
  if (f == nullptr) {
    return Status::invalidArgument("key_file " + key_file +
                                   ": cannot open: " + std::strerror(errno));
  }
  EVP_PKEY* key = PEM_read_PrivateKey(f, nullptr, noPassphrase, nullptr);
  std::fclose(f);
  if (key == nullptr) {
    return Status::invalidArgument(
        "key_file " + key_file +
        ": cannot load a PEM private key (encrypted keys are not supported): " + opensslErrors());
  }
  const bool matches = X509_check_private_key(SSL_CTX_get0_certificate(ctx), key) == 1;
  const bool used = matches && SSL_CTX_use_PrivateKey(ctx, key) == 1;
  EVP_PKEY_free(key);
  if (!matches) {
    ERR_clear_error();
    return Status::invalidArgument("key_file " + key_file +
                                   " does not match the certificate in cert_file " + cert_file);
  }
  if (!used) return Status::invalidArgument("key_file " + key_file + ": " + opensslErrors());
  return Status::ok();
}

std::string fileStamp(const std::string& path) {
  if (path.empty()) return "-";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "missing";
  return std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
}

void checkReadable(ConfigReader& r, const std::string& key, const std::string& path) {
  if (!path.empty() && ::access(path.c_str(), R_OK) != 0) {
    r.error(key, "cannot read '" + path + "': " + std::strerror(errno));
  }
}

}  // namespace

void readTlsServerConfig(ConfigReader& r, TlsServerConfig& out) {
  r.required("cert_file", out.cert_file);
  r.required("key_file", out.key_file);
  r.optional("client_ca_file", out.client_ca_file);
  int64_t watch_ms = out.watch_interval.count();
  if (r.optional("watch_interval_ms", watch_ms, 0, 3'600'000))
    out.watch_interval = std::chrono::milliseconds(watch_ms);
  checkReadable(r, "cert_file", out.cert_file);
  checkReadable(r, "key_file", out.key_file);
  checkReadable(r, "client_ca_file", out.client_ca_file);
}

void readTlsClientConfig(ConfigReader& r, TlsClientConfig& out) {
  r.optional("verify", out.verify);
  r.optional("ca_file", out.ca_file);
  r.optional("server_name", out.server_name);
  r.optional("cert_file", out.cert_file);
  r.optional("key_file", out.key_file);
  if (out.cert_file.empty() != out.key_file.empty())
    r.error("", "cert_file and key_file go together (mutual TLS)");
  checkReadable(r, "ca_file", out.ca_file);
  checkReadable(r, "cert_file", out.cert_file);
  checkReadable(r, "key_file", out.key_file);
}

std::string opensslErrors() {
  std::string out;
  char buf[256];
  while (const unsigned long e = ERR_get_error()) {
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

std::string tlsFileStamps(const TlsServerConfig& c) {
  return fileStamp(c.cert_file) + "|" + fileStamp(c.key_file) + "|" + fileStamp(c.client_ca_file);
}

Result<std::shared_ptr<const TlsServerContext>> loadServerTls(const TlsServerConfig& c) {
  if (c.cert_file.empty() || c.key_file.empty()) {
    return Status::invalidArgument("TLS needs both cert_file and key_file");
  }
  auto out = std::make_shared<TlsServerContext>();
  out->stamps = tlsFileStamps(c);
  SSL_CTX* ctx = out->ssl().native_handle();
  ERR_clear_error();
  commonOptions(ctx);
  SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
  INFERA_RETURN_IF_ERROR(loadCertificateAndKey(ctx, c.cert_file, c.key_file));
  X509* cert = SSL_CTX_get0_certificate(ctx);
  out->info = describe(cert);
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) <= 0) {
    return Status::invalidArgument("cert_file " + c.cert_file + ": the certificate (serial " +
                                   out->info.serial + ") has expired");
  }
  if (!c.client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, c.client_ca_file.c_str(), nullptr) != 1) {
      return Status::invalidArgument("client_ca_file " + c.client_ca_file +
                                     ": cannot load CA certificates: " + opensslErrors());
    }
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(c.client_ca_file.c_str());
    if (names == nullptr) {
      return Status::invalidArgument("client_ca_file " + c.client_ca_file +
                                     ": no CA certificate in it");
    }
    SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    out->client_certs = true;
  }
  // Sessions (IDs and tickets) are resumable only within this context: a client resuming
  // after a reload does a full handshake against the new certificate.
  static constexpr unsigned char kSessionContext[] = "infera";
  SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof(kSessionContext) - 1);
  SSL_CTX_set_alpn_select_cb(ctx, selectAlpn, nullptr);
  ERR_clear_error();
  return std::shared_ptr<const TlsServerContext>(std::move(out));
}

TlsCertificateInfo certificateInfo(const TlsServerContext& context) { return context.info; }

Result<std::shared_ptr<const TlsClientContext>> makeClientTls(const TlsClientConfig& c) {
  auto out = std::make_shared<TlsClientContext>();
  out->config = c;
  SSL_CTX* ctx = out->ssl().native_handle();
  ERR_clear_error();
  commonOptions(ctx);
  if (c.verify) {
    if (!c.ca_file.empty()) {
      if (SSL_CTX_load_verify_locations(ctx, c.ca_file.c_str(), nullptr) != 1) {
        return Status::invalidArgument("ca_file " + c.ca_file +
                                       ": cannot load CA certificates: " + opensslErrors());
      }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
      return Status::invalidArgument("cannot load the system CA store: " + opensslErrors());
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  }
  if (c.cert_file.empty() != c.key_file.empty()) {
    return Status::invalidArgument("a client certificate needs both cert_file and key_file");
  }
  if (!c.cert_file.empty())
    INFERA_RETURN_IF_ERROR(loadCertificateAndKey(ctx, c.cert_file, c.key_file));
  if (SSL_CTX_set_alpn_protos(ctx, kAlpnHttp11, sizeof(kAlpnHttp11)) != 0) {
    return Status::internal("cannot set ALPN: " + opensslErrors());
  }
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx, onNewSession);
  out->fingerprint = std::string(c.verify ? "verify" : "noverify") + "|" + c.ca_file + "|" +
                     c.server_name + "|" + c.cert_file + "|" + c.key_file + "|" +
                     fileStamp(c.ca_file) + "|" + fileStamp(c.cert_file) + "|" +
                     fileStamp(c.key_file);
  ERR_clear_error();
  return std::shared_ptr<const TlsClientContext>(std::move(out));
}

const std::string& clientTlsFingerprint(const TlsClientContext& context) {
  return context.fingerprint;
}

void prepareClientSsl(SSL* ssl, const TlsClientContext& ctx, const std::string& host,
                      TlsSessionSlot* slot) {
  std::string name = ctx.config.server_name.empty() ? host : ctx.config.server_name;
  if (name.size() > 2 && name.front() == '[' && name.back() == ']')
    name = name.substr(1, name.size() - 2);
  boost::system::error_code ec;
  asio::ip::make_address(name, ec);
  const bool is_ip = !ec;
  if (!is_ip) SSL_set_tlsext_host_name(ssl, name.c_str());
  if (ctx.config.verify) {
    if (is_ip) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
    } else {
      SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      SSL_set1_host(ssl, name.c_str());
    }
  }
  if (slot != nullptr) {
    SSL_set_ex_data(ssl, sessionIndex(), slot);
    if (slot->get() != nullptr) SSL_set_session(ssl, slot->get());
  }
}

std::string clientHandshakeError(SSL* ssl, const boost::system::error_code& ec) {
  const long verdict = SSL_get_verify_result(ssl);
  ERR_clear_error();
  if (verdict != X509_V_OK)
    return std::string("certificate verify failed: ") + X509_verify_cert_error_string(verdict);
  if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated)
    return "the server closed the connection";
  return ec.message();
}

}  // namespace infera::net
