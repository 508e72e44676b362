#pragma once
// The GET of a whole object, streamed to a sink and resumed after a dropped body, shared by
// the S3 and Azure clients. Retrying into the same sink would hand it the bytes of the cut-
// off attempt twice, so a retry asks only for what the sink has not seen (Range), of the
// very object it started on (If-Match on the first answer's ETag, checked again on the
// answer): an object replaced meanwhile fails the GET rather than mixing two objects.

#include <cstdint>
#include <functional>
#include <lodge/error.hpp>
#include <lodge/http/retry.hpp>
#include <lodge/http/transport.hpp>
#include <string>

namespace lodge::http {

using Sink = std::function<bool(const char *, size_t)>;

// One attempt of the GET, built and signed by the backend: `extra` headers added (Range and
// If-Match when resuming), a 2xx body streamed to `sink` once `accept` has approved its
// head (Request::accept); a failed answer turned into the backend's Error.
using GetAttempt = std::function<Result<Response>(const Headers &extra, const Sink &sink,
                                                  const std::function<bool(const Response &)> &accept)>;

struct GetTarget {
  std::string what; // the messages' prefix: "GET key", "GET BLOB name"
  std::string noun; // what the messages call it: "object", "blob"
};

// Streams the whole object to `sink`, each byte once and in order, retrying (and resuming)
// transient failures as `policy` allows. A body that ends short of the first answer's
// Content-Length, or a resumed answer of another object or range, is STORAGE_ERROR.
[[nodiscard]] Status resumable_get(const RetryPolicy &policy, Sleeper &sleeper, const GetTarget &target,
                                   const Sink &sink, const GetAttempt &attempt);

} // namespace lodge::http
