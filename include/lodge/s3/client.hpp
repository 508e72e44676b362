#pragma once
// A SigV4-signed S3 client on one Transport (one connection per worker). Operations
// return typed errors (Errc + HTTP status, S3 code, request id). Transient failures are
// retried with exponential backoff and full jitter, bounded, honouring Retry-After.

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <lodge/aws/credentials.hpp>
#include <lodge/aws/signer.hpp>
#include <lodge/error.hpp>
#include <lodge/http/retry.hpp>
#include <lodge/http/transport.hpp>
#include <lodge/s3/xml.hpp>
#include <lodge/util/clock.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lodge::s3 {

using http::is_transient;
using http::real_sleeper;
using http::RetryPolicy;
using http::Sleeper;

// What a server was found, from its answers, to implement or not (HTTP 405/501,
// MethodNotAllowed, NotImplemented). Shared by every client of one server in a process,
// so a run learns each absence once and warns once. never_versioned is a fact of the bucket,
// not of the server: present once GetBucketVersioning answered that versioning was never
// turned on (so a key holds one object at most), absent once it was (or could not be read).
enum class Feature { list_versions, list_uploads, delete_objects, never_versioned };
enum class Support { unknown, present, absent };
class ServerTraits {
public:
  [[nodiscard]] Support get(Feature f) const;
  // Records what an answer showed; returns true when this is the first news of an absence.
  bool learn(Feature f, Support s);

private:
  std::array<std::atomic<int>, 4> m_slots{}; // by Feature; 0 = unknown
};
// One ServerTraits per name (endpoint and bucket) for the whole process.
[[nodiscard]] std::shared_ptr<ServerTraits> traits_for(const std::string &server);

struct ClientConfig {
  std::string endpoint; // "" = AWS (virtual-hosted); otherwise path-style, e.g. http://127.0.0.1:9000
  std::string region = "us-east-1";
  // "auto": virtual-hosted on AWS (path-style for a bucket with a dot), path-style on a
  // custom endpoint; "path" or "virtual" forces one (the profile's s3.addressing_style).
  std::string addressing_style = "auto";
  std::string bucket;
  aws::Credentials credentials;
  std::shared_ptr<aws::CredentialSource> credential_source; // when set: signs with its current ones instead
  RetryPolicy retry;
  std::shared_ptr<ServerTraits> traits; // shared knowledge of the server; a fresh one when unset
  // x-amz-checksum-* headers (and a part's ChecksumSHA256) with what is uploaded; false for
  // request_checksum_calculation = when_required: none is sent (a bucket call's body keeps
  // its Content-MD5, which S3 requires). The SigV4 payload hash is sent either way.
  bool send_checksums = true;
};

struct PutOptions {
  std::string content_type = "application/octet-stream";
  std::string sha256_hex;                      // payload hash and x-amz-checksum-sha256
  std::map<std::string, std::string> metadata; // x-amz-meta-<name>
  bool if_none_match = true;                   // create-only
  std::string if_match;                        // replace only this ETag (when set; then not create-only)
  std::string tagging;        // x-amz-tagging, URL-encoded ("lodge-state=pending"); "" sends none
  std::string storage_class;  // x-amz-storage-class ("" sends none)
  std::string sse;            // x-amz-server-side-encryption: AES256 or aws:kms
  std::string sse_kms_key_id; // x-amz-server-side-encryption-aws-kms-key-id
  std::string cache_control;  // Cache-Control
  // CreateMultipartUpload: each part carries its SHA-256 (x-amz-checksum-algorithm); false
  // for parts sent by a client through presigned URLs that may not know their digests.
  bool part_checksums = true;
  int64_t deadline_steady_ms = 0;
};

struct PutResult {
  std::string etag;
  std::string version_id;
};

struct HeadResult {
  uint64_t size = 0;
  std::string etag;
  std::string content_type;
  std::map<std::string, std::string> metadata; // names lowercased, without x-amz-meta-
  int64_t last_modified_ms = 0;
  std::string checksum_sha256_hex; // when the store returned one
  std::string version_id;
};

struct CompletedPart {
  int number = 0;
  std::string etag;
  std::string sha256_hex;
};

class Client {
public:
  Client(ClientConfig cfg, std::unique_ptr<http::Transport> transport, const util::Clock &clock,
         Sleeper &sleeper = real_sleeper());

  Result<PutResult> put_object(const std::string &key, http::BodySource &body, const PutOptions &o);
  // The current object, or the version `version_id` names.
  Result<HeadResult> head_object(const std::string &key, const std::string &version_id = {});
  // A whole small object (up to 1 MiB; lodge's own metadata) and its ETag, as sent, in one GET.
  Result<std::pair<std::string, std::string>> get_small_object(const std::string &key);
  // Streams the object's bytes to sink, each byte once and in order: an attempt cut off
  // mid-body is resumed with Range (and If-Match on the first answer's ETag), and the
  // total is checked against the first answer's length. A false return from sink aborts.
  Status get_object(const std::string &key, const std::function<bool(const char *, size_t)> &sink);
  // A presigned GET URL of the key (SigV4 query signing, UNSIGNED-PAYLOAD), valid for
  // expires_s seconds (1 to 604800, the most SigV4 allows) from the clock's now.
  Result<std::string> presign_get(const std::string &key, int64_t expires_s);
  // A presigned PUT of exactly `size` bytes with o's headers (checksum, create-only,
  // metadata, tagging, ...) signed in, so a client must send them as given: the URL and
  // those headers (host excluded).
  Result<std::pair<std::string, http::Headers>> presign_put(const std::string &key, uint64_t size,
                                                            const PutOptions &o, int64_t expires_s);
  // A presigned UploadPart of part `number` of `upload_id`: exactly `size` bytes (signed
  // Content-Length), and with `sha256_hex` given its x-amz-checksum-sha256 signed in too.
  // The URL and the headers a client must send (host excluded).
  Result<std::pair<std::string, http::Headers>> presign_part(const std::string &key,
                                                             const std::string &upload_id, int number,
                                                             uint64_t size, const std::string &sha256_hex,
                                                             int64_t expires_s);
  // Every part of an incomplete multipart upload, in part-number order (page by page).
  Result<std::vector<ListedPart>> list_parts(const std::string &key, const std::string &upload_id);
  // A missing key is success; a missing bucket is not. With `if_match`, only while the
  // current object's ETag is that one (PRECONDITION_FAILED otherwise).
  Status delete_object(const std::string &key, const std::string &version_id = {},
                       const std::string &if_match = {});
  // One key of a DeleteObjects request; with `etag`, deleted only while the current object's
  // ETag is that one (S3 evaluates it per key, as If-Match).
  struct DeleteEntry {
    std::string key;
    std::string etag;
  };
  // DeleteObjects: up to 1,000 distinct keys in one request. One Status per entry, in order:
  // ok (deleted, or already gone), PRECONDITION_FAILED (its ETag differs now) or its error.
  // UNSUPPORTED for the whole call (without a request once learned) where the server does
  // not take it.
  Result<std::vector<Status>> delete_objects(const std::vector<DeleteEntry> &entries);
  // Calls visit for each object under prefix in key order, page by page; visit may stop
  // the listing by returning false.
  Status list_objects(const std::string &prefix, const std::function<bool(const ListedObject &)> &visit,
                      int page_size = 1000);
  // UNSUPPORTED, without a request, once the server was found not to implement it.
  Status list_versions(const std::string &prefix, const std::function<bool(const ListedVersion &)> &visit);
  // Every version, every delete marker and every incomplete multipart upload of exactly
  // this key. Idempotent. On a server that cannot list versions, a plain delete; on one
  // that cannot list uploads, no upload is aborted (both said once by a warning).
  Status delete_everything(const std::string &key);

  Result<std::string> create_multipart(const std::string &key, const PutOptions &o);
  Result<CompletedPart> upload_part(const std::string &key, const std::string &upload_id, int number,
                                    http::BodySource &body, const std::string &sha256_hex,
                                    int64_t deadline_steady_ms);
  Result<PutResult> complete_multipart(const std::string &key, const std::string &upload_id,
                                       const std::vector<CompletedPart> &parts, bool if_none_match,
                                       int64_t deadline_steady_ms);
  Status abort_multipart(const std::string &key, const std::string &upload_id);
  // UNSUPPORTED, without a request, once the server was found not to implement it.
  Status list_multipart_uploads(const std::string &prefix,
                                const std::function<bool(const ListedUpload &)> &visit);
  [[nodiscard]] Support support(Feature f) const { return m_traits->get(f); }

  // The object's tags (PutObjectTagging replaces the whole set; GetObjectTagging reads it).
  Status put_object_tagging(const std::string &key, const std::map<std::string, std::string> &tags);
  Result<std::map<std::string, std::string>> get_object_tagging(const std::string &key,
                                                                const std::string &version_id = {});
  // The bucket's lifecycle configuration as the server sent it (XML); NOT_FOUND when the
  // bucket has none (NoSuchLifecycleConfiguration).
  Result<std::string> get_bucket_lifecycle();
  // Replaces the bucket's whole lifecycle configuration with xml (sent with Content-MD5
  // and x-amz-checksum-sha256, which S3 requires of this call).
  Status put_bucket_lifecycle(const std::string &xml);
  // The bucket's versioning status: "Enabled", "Suspended", or "" when never versioned.
  Result<std::string> get_versioning();
  // Whether the bucket was never versioned (GetBucketVersioning answered no Status), asked
  // once per process and bucket; false when it was, or when the answer could not be read.
  bool never_versioned();

  [[nodiscard]] const ClientConfig &config() const { return m_cfg; }

private:
  struct Call {
    std::string method;
    std::string key; // object key; empty for bucket-level calls
    aws::Params query;
    http::Headers headers;
    http::BodySource *body = nullptr;
    std::string payload_hash;
    std::function<bool(const char *, size_t)> sink;
    int64_t deadline_steady_ms = 0;
    std::string what; // for messages: "PUT key"
  };
  Result<http::Response> send(const Call &call);
  // A SigV4 query-signed URL of the key with `headers` signed in (host added).
  Result<std::string> presign(const std::string &method, const std::string &key, const http::Headers &headers,
                              int64_t expires_s, const aws::Params &query = {});
  // What a new object carries besides its bytes (PutObject and CreateMultipartUpload take
  // the same headers): metadata, tags, storage class, encryption, Cache-Control.
  static void add_object_headers(Call &c, const PutOptions &o);
  // One attempt; accept (when set) vets a 2xx answer's head before its body streams.
  Result<http::Response> send_once(const Call &call,
                                   const std::function<bool(const http::Response &)> &accept = {});
  // Records a feature's presence or absence from a call's outcome (warning once).
  void learn(Feature f, const Status &outcome);
  // A bucket- or object-level call with an XML body, its Content-MD5 and SHA-256 checksum.
  Result<http::Response> send_xml(const std::string &method, const std::string &key, aws::Params query,
                                  const std::string &xml, const std::string &what);
  [[nodiscard]] Error error_from(const http::Response &r, const std::string &what) const;

  ClientConfig m_cfg;
  std::unique_ptr<http::Transport> m_transport;
  const util::Clock &m_clock;
  Sleeper &m_sleeper;
  aws::SigningKeyCache m_keys;
  std::shared_ptr<ServerTraits> m_traits;
  std::string m_base_url; // scheme://host[:port]
  std::string m_host;     // Host header
  bool m_path_style = true;
};

} // namespace lodge::s3
