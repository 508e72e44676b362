#pragma once
// The libcurl lodge runs with (`lodge --version`): read at run time, since the shared
// library loaded may be newer than the headers lodge was built against.

#include <string>

namespace lodge::http {

struct CurlVersion {
  std::string version; // "7.88.1"
  std::string tls;     // its TLS backend, "OpenSSL/3.0.17"; empty when built without one
};

[[nodiscard]] CurlVersion curl_version();

} // namespace lodge::http
