#pragma once
// The object store as the pipeline sees it: keys, bodies, digests, metadata, staged
// uploads, state tags, capabilities and typed errors; nothing of one backend leaks out.
// Backends, chosen by URL scheme through one registry (scheme_for in src/store/store.cpp;
// each backend's Scheme, src/store/stores.hpp): S3 (s3://bucket/prefix), Azure Blob Storage
// (az://container/prefix) and a local directory (file:///dir), each with the same contract
// (tests/store).

#include <atomic>
#include <cstdint>
#include <functional>
#include <lodge/error.hpp>
#include <lodge/store/object_options.hpp>
#include <lodge/util/backpressure.hpp>
#include <lodge/util/token_bucket.hpp>
#include <lodge/util/transfer_watch.hpp>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace lodge::store {

using Metadata = std::map<std::string, std::string>; // lowercase names

// lodge's stamp on every object it writes. The names are valid on every backend (Azure
// metadata names are C# identifiers: no '-'). S3 and file:// also read the names lodge
// wrote before (lodge-record-id, lodge-sha256, ...) and report them under these.
namespace meta {
inline constexpr const char *record = "lodgerecord"; // the record id, decimal
inline constexpr const char *sha256 = "lodgesha256"; // the content's SHA-256, hex
inline constexpr const char *ledger = "lodgeledger"; // the ledger's uuid
inline constexpr const char *owner = "lodgeowner";
inline constexpr const char *path = "lodgepath";     // the relative path, percent-encoded
inline constexpr const char *prefix = "lodgeprefix"; // the run prefix, when there is one
} // namespace meta

// Renames the old hyphenated stamp names of `m` to the ones above (a new name already
// present wins). For backends that may hold objects written before the rename.
void adopt_legacy_metadata(Metadata &m);

// A stamp as an object carries it: each part it has, and the record id when it is a
// positive decimal number written as lodge writes it (0 otherwise: missing or unreadable).
struct StampSeen {
  std::optional<std::string> ledger;
  std::optional<std::string> record;
  int64_t record_id = 0;
};
[[nodiscard]] StampSeen read_stamp(const Metadata &meta);

// The one stamp check (I8): why `meta` does not stamp an object as record `record_id` of
// the ledger `ledger_uuid` (no stamp; another ledger; another record; a record id that does
// not parse), or nullopt when it names exactly that ledger and record. `record_id` is the
// row that wrote the object (a row that shares another's object passes that row's id).
// Every delete and abort asks it before anything goes, and reconcile before it claims an
// object; a record id below 1 never matches.
[[nodiscard]] std::optional<std::string> stamp_mismatch(const Metadata &meta, const std::string &ledger_uuid,
                                                        int64_t record_id);

// The stamp a delete requires: the ledger and the row that wrote the object.
struct Stamp {
  std::string ledger_uuid;
  int64_t record_id = 0;
};

// A byte range of an open file, to be sent as an object or a part.
struct Body {
  int fd = -1;
  uint64_t offset = 0;
  uint64_t size = 0;
  std::string sha256_hex; // the digest the bytes must have
  // When set, every byte read to be sent is added here as it leaves (and what a retried
  // attempt had counted is taken back): the upload's progress line reads it.
  std::atomic<uint64_t> *sent = nullptr;
  // When set, told of every byte read to be sent, and the bound the transfer ends by while
  // it runs (the deadline given beside the body is then only the bound at its start).
  util::TransferWatch *watch = nullptr;
};

struct PutRequest {
  std::string key;
  Body body;
  std::string content_type;
  Metadata metadata; // lodge's stamp and the user's metadata
  // Tags, storage class, encryption, Cache-Control (content_type and metadata above are
  // what is sent of those); one the store does not accept() is never asked of put().
  ObjectOptions options;
  int64_t deadline_steady_ms = 0; // the transfer is aborted at this monotonic time (0: none)
};

struct PutResult {
  std::string etag;
  std::string version_id;
};

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  std::string etag;
  std::string content_type;
  Metadata metadata; // filled by head(), not by list()
  int64_t last_modified_ms = 0;
  std::string sha256_hex; // when the store keeps one
  std::string version_id; // filled by head() on a versioned bucket; empty otherwise
  // lodge's state tag as list() saw it, where a listing carries tags (Azure): "pending",
  // "committed", or "" when the object has none; nullopt: not known.
  std::optional<std::string> state_tag;
};

// A small object lodge keeps for itself (the id marker under <root>/.lodge/), with the
// tag that names this version of it.
struct SmallObject {
  std::string bytes;
  std::string tag; // an ETag (S3) or the content's SHA-256 (file://)
};

// A staged (multi-part) upload: parts sent separately, then committed as one object.
// S3: an upload id and parts; Azure: block ids and a block list; file://: parts in a temp
// dir. The handle names it; the ledger stores the handle before the first part is sent.
struct StagedRequest {
  std::string key;
  std::string content_type;
  Metadata metadata;
  ObjectOptions options; // as PutRequest's
  // Each part carries its SHA-256 for the server to check (S3: x-amz-checksum-algorithm);
  // false for parts a client sends through presigned URLs without their digests.
  bool part_checksums = true;
};

// An incomplete staged upload, as a listing shows it.
struct StagedUpload {
  std::string key;
  std::string handle;
  int64_t initiated_ms = 0;
};

struct Part {
  int number = 0;
  std::string etag;
  std::string sha256_hex;
};

// A part of an incomplete staged upload as the server lists it (list_parts). Each digest is
// set only where the store vouches that the part's stored bytes have it, so a part whose
// digest equals the local part's holds those bytes (a resumed upload keeps it); "" where
// the store vouches for none, and the part must be sent again to be trusted.
struct StoredPart {
  int number = 0;
  uint64_t size = 0;
  // What complete_staged's Part::etag must name for this part: S3's part ETag, Azure's
  // block id (base64), file://'s SHA-256.
  std::string etag;
  // The part's SHA-256, lowercase hex. S3: the ChecksumSHA256 the server checked when the
  // part was sent with one (staged with part_checksums); file://: computed from the stored
  // part file as it is listed. Azure: never.
  std::string sha256_hex;
  // The part's MD5, lowercase hex. S3: the part's ETag when it is a plain 32-hex-digit one
  // (the server's MD5 of the bytes it stored; an SSE-KMS or SSE-C part's ETag is no MD5 but
  // looks like one: it then only fails to match, and the part is sent again). Azure: the
  // digest in the block id, which Put Block sent as Content-MD5 and the service checked
  // before staging the block (none for a part sent through a presigned URL). file://: never.
  std::string md5_hex;
};

// A temporary file of the store's own (file://: under <root>/.lodge-tmp) that a killed
// process may have left: its name from the store's root, and the time it was last in use
// (last written; for a delete's object moved aside, when it was moved).
struct StoreTemp {
  std::string name;
  int64_t since_ms = 0;
  uint64_t size = 0;
};

// Optional abilities of a store's server, learned from its answers during a run.
enum class Capability { version_listing, staged_listing };
enum class Support { unknown, present, absent };

// What a backend can do, known without asking its server.
struct Capabilities {
  bool versions = false;       // it may keep old versions (remove_owned clears lodge's own)
  bool staged_listing = false; // it can list incomplete staged uploads
  bool guarded_delete = false; // remove_owned(key, pending_only) is enforced by the server itself
  bool state_tags = false;     // puts tag objects pending; mark_committed tags them committed
  bool presign = false;        // presign_get (and presign_put) can make a URL
  // The server itself refuses a body whose SHA-256 checksum header differs, and HEAD returns
  // the checksum it verified (AWS S3). Elsewhere a checksum a HEAD returns is only what
  // the sender claimed (moto, some S3-compatible servers): bytes are verified by reading them.
  bool verifies_checksums = false;
  // Each upload carries its SHA-256 checksum for the server to check (false: the user told
  // lodge to send none, S3's request_checksum_calculation = when_required; lodge still hashes
  // every file and verifies what it reads back).
  bool sends_checksums = true;
  // The most one presigned PUT may carry (S3: 5 GiB; Azure's Put Blob: 5000 MiB); 0: none.
  uint64_t max_presigned_put = 0;
  // presign_part can make a URL per part of a staged upload (lodge reserve --parts).
  bool presign_parts = false;
  // The smallest part but the last, the largest part and the most parts a staged upload
  // takes (S3: 5 MiB, 5 GiB, 10000; Azure's blocks: none, 4000 MiB, 50000); 0: no bound.
  uint64_t min_part_size = 0;
  uint64_t max_part_size = 0;
  int max_parts = 0;
};

// A direct upload's object: what a presigned PUT must carry (lodge reserve).
struct PresignPutRequest {
  std::string key;
  uint64_t size = 0;
  std::string sha256_hex;
  std::string content_type;
  Metadata metadata; // lodge's stamp and the user's metadata
  ObjectOptions options;
  int64_t expires_s = 0;
};

// One part of a direct staged upload (lodge reserve --parts): exactly `size` bytes as part
// `number` of the staged upload `handle`; with `sha256_hex` given, only those bytes where the
// server checks a part's checksum.
struct PresignPartRequest {
  std::string key;
  std::string handle;
  int number = 0;
  uint64_t size = 0;
  std::string sha256_hex;
  int64_t expires_s = 0;
};

// A URL and the exact headers a client without credentials must send with the body.
struct PresignedPut {
  std::string method = "PUT";
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
};

// remove_owned's guard: pending_only leaves an object whose state tag is not pending
// (S3 with state tags: tagged committed; Azure, which enforces it itself: anything but
// pending) and says so in Removal::refused. Stores without state tags ignore it.
enum class DeleteGuard { none, pending_only };

// What remove_owned found at a key and left there.
struct Removal {
  // Each object (or version) left because its stamp is not the one required, and why
  // ("the current version: it has no lodge stamp"). Nothing is removed from a key that
  // keeps something but the required stamp's own versions.
  std::vector<std::string> kept;
  // The guard left the object (stamped as required) because of its state tag: why.
  std::optional<std::string> refused;
  int removed = 0; // objects and versions removed
};

// One removal remove_owned would make, looked at but not yet made (plan_removal): the object
// at `key` read and its stamp and guard checked, so that remove_planned can delete many in one
// request where the store can. A plan deletes exactly what remove_owned would (I8): only an
// object it read with the required stamp, on the condition that it is still that object.
struct PlannedRemoval {
  std::string key;
  Stamp stamp;
  DeleteGuard guard = DeleteGuard::none;
  Removal found;          // what was kept or refused (then nothing is deleted at the key)
  bool present = false;   // an object to delete while its ETag is still `etag`
  std::string etag;       //
  bool per_object = true; // remove_planned runs remove_owned for this key (nothing was read)
};

// The backstop rule that deletes what sweep missed, in the store's own format.
struct LifecycleRule {
  std::string format;     // "s3-lifecycle-xml" or "azure-management-policy-json"
  std::string document;   // the rule (S3: the whole bucket configuration, others' rules kept)
  std::string apply_hint; // how to install it where lodge cannot
  bool can_apply = false; // apply_lifecycle can install it
};

class ObjectStore {
public:
  virtual ~ObjectStore() = default;
  // The URL it was opened from, for messages.
  [[nodiscard]] virtual std::string describe() const = 0;
  // Every key lodge writes starts with this ("" or "prefix/").
  [[nodiscard]] virtual const std::string &key_prefix() const = 0;

  // Create-only: PRECONDITION_FAILED when the key exists. Sends exactly body.size bytes
  // and fails with FILE_CHANGED if they do not hash to body.sha256_hex.
  virtual Result<PutResult> put(const PutRequest &req) = 0;
  virtual Result<ObjectInfo> head(const std::string &key) = 0;
  // Streams the object's bytes to sink, in order; sink returns false to abort.
  virtual Status read(const std::string &key, const std::function<bool(const char *, size_t)> &sink) = 0;
  // Writes the object's bytes to fd.
  Status get(const std::string &key, int fd);
  // I8's delete. Removes from `key` each object (each version, where the store keeps them)
  // whose stamp names `stamp` (stamp_mismatch), each on the condition that it is still the
  // object whose stamp was read: S3 deletes a version by its id (immutable) or the current
  // object with If-Match on its ETag, Azure with If-Match, file:// moves the file aside and
  // removes it only if it is the inode read (I8, ARCHITECTURE.md).
  // What is not so stamped stays and is listed in `kept`; delete markers stay. When nothing
  // was kept, the key's incomplete staged uploads are aborted too (they carry no stamp a
  // store returns; the exact key is the row's own). A missing key is success. An object that
  // changes between the read and the delete is looked at again; an error if it keeps changing.
  virtual Result<Removal> remove_owned(const std::string &key, const Stamp &stamp, DeleteGuard guard) = 0;
  // Whether this connection removes in batches (plan_removal, then remove_planned): asked
  // before a batch; a store may ask its server once (S3: a bucket never versioned). When
  // false, remove_owned per key is the way (and what the defaults below do).
  virtual bool batches_removals() { return false; }
  // The first half of remove_owned for one key: what is there, read and checked. By default
  // nothing is read (the plan is per_object). Safe to call on several connections at once.
  virtual Result<PlannedRemoval> plan_removal(const std::string &key, const Stamp &stamp, DeleteGuard guard);
  // The second half for many keys, one result per plan in order (remove_owned's meaning):
  // the planned deletes in as few requests as the store allows, each on its condition; a key
  // whose condition failed, or that a plan could not settle, goes through remove_owned; then
  // the incomplete staged uploads at the keys from which nothing was kept are aborted.
  virtual std::vector<Result<Removal>> remove_planned(const std::vector<PlannedRemoval> &plans);
  // Removes one of lodge's own small objects (get_small/put_small: the doctor's probe), every
  // version of it. No stamp is checked: never for a row's key.
  virtual Status remove_small(const std::string &key) = 0;
  // Visits objects under prefix in ascending byte order of key; visit returns false to stop.
  virtual Status list(const std::string &prefix, const std::function<bool(const ObjectInfo &)> &visit) = 0;

  // The handle of a new staged upload (which may be made without a request).
  virtual Result<std::string> begin_staged(const StagedRequest &req) = 0;
  virtual Result<Part> put_part(const std::string &key, const std::string &handle, int number,
                                const Body &body, int64_t deadline_steady_ms) = 0;
  // Create-only, like put(); `req` is the one begin_staged was given. A store that assembles
  // the parts itself (file://) checks each against its Part::sha256_hex, where given, and
  // the whole against the SHA-256 of its stamp (meta::sha256), where given: CONTENT_MISMATCH
  // when they differ, and nothing is published.
  virtual Result<PutResult> complete_staged(const StagedRequest &req, const std::string &handle,
                                            const std::vector<Part> &parts, int64_t deadline_steady_ms) = 0;
  virtual Status abort_staged(const std::string &key, const std::string &handle) = 0;
  // Every object this connection's put and complete_staged returned, and every removal
  // remove_owned reported, is durable when flush returns ok (a store whose writes are durable
  // when they answer: a no-op). The uploader calls it after the put and before the row is
  // confirmed; cleanup after its deletes and before their tasks are finished. An error
  // leaves the object (or its removal) possibly durable, possibly not.
  virtual Status flush() { return ok_status(); }
  // What flush() covers: connections whose domain is the same non-null pointer share their
  // durability (one flush of any of them makes durable what every one of them wrote: the
  // file:// connections of one root, one syncfs). nullptr: flush() is a no-op, nothing to wait for.
  // A store with a domain must allow flush() from another thread while this connection is
  // busy (the group-commit leader runs it for the whole batch).
  [[nodiscard]] virtual const void *flush_domain() const { return nullptr; }
  // flush() as a function that stays valid after this connection is closed (the group
  // commit's leader may run it for a confirm whose uploader has ended). Empty exactly when
  // flush_domain() is null.
  [[nodiscard]] virtual std::function<Status()> flusher() const { return {}; }
  // Lodge's own small objects (the id marker). get_small: the whole object and its tag;
  // NOT_FOUND when missing. put_small: replaces the object only while its tag is still
  // `if_tag` (S3: If-Match), or creates it only if missing when `if_tag` is empty (S3:
  // If-None-Match: *); PRECONDITION_FAILED when the condition does not hold. Returns the
  // new tag.
  virtual Result<SmallObject> get_small(const std::string &key) = 0;
  virtual Result<std::string> put_small(const std::string &key, const std::string &bytes,
                                        const std::string &if_tag) = 0;
  // UNSUPPORTED when the server cannot list incomplete staged uploads (callers do without).
  virtual Status list_staged(const std::string &prefix,
                             const std::function<bool(const StagedUpload &)> &visit) = 0;
  // A URL that lets whoever holds it GET the object until `expires_s` seconds from now,
  // without credentials. UNSUPPORTED for a store that cannot sign one (file://).
  virtual Result<std::string> presign_get(const std::string &key, int64_t expires_s);
  // A URL that lets whoever holds it create the object `req` describes, and no other
  // bytes where the server checks them: create-only, the size, checksum, content type and
  // metadata pinned by the signature. UNSUPPORTED for a store that cannot sign one.
  virtual Result<PresignedPut> presign_put(const PresignPutRequest &req);
  // A URL that lets whoever holds it send one part of a staged upload begun with
  // begin_staged (part_checksums false unless every part's digest is given), its length
  // pinned by the signature. UNSUPPORTED where it cannot be signed (file://).
  virtual Result<PresignedPut> presign_part(const PresignPartRequest &req);
  // The parts a staged upload holds so far, one per part number, in part-number order (a
  // part sent again under its number is listed as last sent). NOT_FOUND when the staged
  // upload is gone (aborted, completed, never begun, or no part of it staged yet on Azure,
  // where parts are all there is of it). UNSUPPORTED where the store cannot list them.
  virtual Result<std::vector<StoredPart>> list_parts(const std::string &key, const std::string &handle);
  // Visits the store's own temporary files in name order (none on a store that keeps none:
  // S3, Azure). Only names the store itself writes are listed; anything else is left alone.
  virtual Status list_temps(const std::function<bool(const StoreTemp &)> &visit);
  // Removes the temporary file `name` (as list_temps named it) if it is still one of the
  // store's own, last in use before `before_ms` (read again now): true when removed; false
  // when it is gone or younger now. UNSUPPORTED on a store that keeps none.
  virtual Result<bool> remove_temp(const std::string &name, int64_t before_ms);
  // What this run has learned so far of an optional ability (unknown until used).
  [[nodiscard]] virtual Support support(Capability /*capability*/) const { return Support::unknown; }
  [[nodiscard]] virtual Capabilities capabilities() const = 0;
  // After the object's row became ACTIVE: its state tag becomes committed. Success without
  // a request on a store that does not tag.
  // PutObjectTagging and Set Blob Tags replace the whole tag set: `user_tags`, the tags
  // the upload asked for, are written with it.
  virtual Status mark_committed(const std::string &key,
                                const std::map<std::string, std::string> &user_tags) = 0;
  // lodge's pending tag again (with the user's tags), as a put leaves it: reconcile --apply
  // on a failed upload's object someone else re-tagged. Success without a request on a
  // store that does not tag.
  virtual Status mark_pending(const std::string &key, const std::map<std::string, std::string> &user_tags);
  // Why a guarded delete (DeleteGuard::pending_only) would leave the object, by its tags
  // ("is tagged state=committed", "has no state tag"); nullopt when it would remove it
  // (tagged pending, or what the store counts as pending: an Azure blob with no tag at all).
  // UNSUPPORTED on a store that does not tag.
  virtual Result<std::optional<std::string>> guard_refusal(const std::string &key);
  // Whether put() and begin_staged() can honour these options (tags, storage class,
  // encryption, Cache-Control, metadata names): UNSUPPORTED naming what this store cannot
  // keep, USAGE for a value it refuses. Asked before anything is recorded. By default only
  // metadata, Content-Type and Cache-Control are kept.
  [[nodiscard]] virtual Status accepts(const ObjectOptions &o) const;
  // The backstop rule expiring pending objects (and abandoned staged uploads) under the
  // store's root after `days` days. UNSUPPORTED where there is no such thing (file://).
  virtual Result<LifecycleRule> lifecycle_rule(int days);
  // Installs a rule lifecycle_rule made. UNSUPPORTED where lodge cannot (rule.apply_hint
  // says how).
  virtual Status apply_lifecycle(const LifecycleRule &rule);
  // The IDs of the lifecycle rules installed on the store (lodge's start with "lodge-"), in
  // the server's order; empty when there are none. UNSUPPORTED where lodge cannot read them
  // (Azure: a management-plane setting a storage key cannot read; file://: no such thing).
  virtual Result<std::vector<std::string>> installed_lifecycle_rules();
  // Whether the store keeps old versions of what is overwritten or deleted: "Enabled",
  // "Suspended" (it did, and keeps what it kept) or "" (never). UNSUPPORTED where it is no
  // setting of the store lodge can read (Azure: the account's; file://: none).
  virtual Result<std::string> versioning_state();
};

// A store setting as given, and where it came from: "file PATH", "flag --region", "env
// AWS_REGION", "the store options", or "default".
struct Setting {
  std::string value; // a true/false key's value is "true" or "false"
  std::string source;
};
using Settings = std::map<std::string, Setting>;

// A key of the configuration's store settings (the top-level endpoint, region, ca_bundle,
// profile, tag_state), and whether its value is true or false rather than text.
struct SettingKey {
  const char *name;
  bool boolean = false;
};

// Every store key some scheme reads, each once: what a configuration file may carry and
// hands over as given (an s3:// store reads them all; another scheme ignores those it has
// no use for, so one configuration serves hosts of different stores alike).
[[nodiscard]] std::vector<SettingKey> setting_keys();

// What a scheme's own configuration says of an upload run's transfer (S3: the AWS profile's
// `s3 =` sub-section), below lodge's configuration; 0 where it says nothing.
struct TransferDefaults {
  int jobs = 0;
  uint64_t multipart_threshold = 0;
  uint64_t part_size = 0;
  uint64_t bandwidth = 0; // bytes per second
  // Where each set one came from, by the names above ("file PATH [profile P] s3.KEY").
  std::map<std::string, std::string> sources;
};

// A store's settings as its scheme resolved them from what was given, the environment and
// the scheme's own sources (S3: the AWS shared config profile): validated once, when the
// configuration is loaded, and handed to open_backend.
class StoreConfig {
public:
  virtual ~StoreConfig() = default;
  // The endpoint requests go to ("" for the cloud's own): S3's, or the blob endpoint.
  [[nodiscard]] virtual const std::string &endpoint() const = 0;
  [[nodiscard]] virtual const std::string &ca_bundle() const = 0;
  // Whether objects are tagged pending, then committed, where the scheme leaves it to the
  // configuration (Scheme::Tagging::configured: S3's tag_state); false elsewhere.
  [[nodiscard]] virtual bool tag_state() const { return false; }
  // Where requests go when no endpoint is configured ("https://s3.eu-west-1.amazonaws.com/"),
  // "" when the scheme has no such place: lodge doctor asks it the time.
  [[nodiscard]] virtual std::string default_service_url() const { return {}; }
  // Said once before the first connection (unless -q), "" for nothing: S3's assumed region.
  [[nodiscard]] virtual std::string notice() const { return {}; }
  // The scheme's defaults for an upload run (none unless it has a source of them).
  [[nodiscard]] virtual TransferDefaults transfer_defaults() const { return {}; }
  // Adds these settings to `lodge config`'s JSON: the keys endpoint, region, ca_bundle,
  // profile and tag_state, and the backend's own section with each setting's source ("s3").
  virtual void to_json(nlohmann::json &out) const = 0;
};

// The settings of the store `url` names, resolved by its scheme from `given` (the
// configuration file's store keys and the flags, with their sources) and the process
// environment. Throws LodgeError(CONFIG_INVALID) naming the key and what was expected.
[[nodiscard]] std::shared_ptr<const StoreConfig>
resolve_settings(const std::string &url, const Settings &given,
                 const std::map<std::string, std::string> &env);

struct StoreOptions {
  std::string url; // s3://bucket/prefix, az://container/prefix or file:///dir
  // The resolved settings (config::load's); when null, open_backend resolves `settings`,
  // with endpoint and ca_bundle given as by flags, over `env`.
  std::shared_ptr<const StoreConfig> config;
  Settings settings;
  std::string endpoint; // S3: the S3 endpoint; Azure: the blob endpoint ("" for the cloud's own)
  std::string ca_bundle;
  std::map<std::string, std::string> env; // where a backend finds its credentials
  bool verify_tls = true;
  int64_t connect_timeout_ms = 10'000;
  int64_t low_speed_time_s = 30;
  // Attempts per request, the first included; 0: the backend's own (S3: its max_attempts
  // setting; Azure: the retry policy's default).
  int max_attempts = 0;
  // The process's byte budget (--bwlimit), shared by every connection: an object's or a
  // part's bytes sent, and an object's bytes read, are taken from it. Null: unlimited.
  std::shared_ptr<util::TokenBucket> limiter;
  // The process's count of throttling answers and transient failures, shared by every
  // connection (the upload run adapts its concurrency to it). Null: not counted.
  std::shared_ptr<util::Backpressure> backpressure;
};

// What `lodge config` shows of the credentials a store would use, never the secrets.
struct CredentialView {
  std::string source;   // "environment", "shared credentials file (profile ci)", ...
  std::string identity; // shortened: "AKIA...WXYZ", an account name
  bool has_token = false;
  std::string error; // when none could be found: why
  struct Step {
    std::string provider;
    bool used = false;
    std::string why;
  };
  std::vector<Step> chain; // each provider asked, in order (lodge config --explain)
};

// A store location resolved once for the process: its URL parsed, its credentials found.
class Backend {
public:
  virtual ~Backend() = default;
  // A new connection (one per worker), wrapped so the store.* failpoints apply. Throws
  // LodgeError when the credentials could not be resolved.
  [[nodiscard]] virtual std::unique_ptr<ObjectStore> connect() = 0;
  // nullopt for a store that needs no credentials.
  [[nodiscard]] virtual std::optional<CredentialView> credentials() const = 0;
};

// The backend the URL's scheme names. Throws LodgeError(CONFIG_INVALID) on a bad URL.
[[nodiscard]] std::shared_ptr<Backend> open_backend(const StoreOptions &opts);

// open_backend(opts)->connect(): for one connection.
[[nodiscard]] std::unique_ptr<ObjectStore> open_store(const StoreOptions &opts);

// Throws LodgeError(CONFIG_INVALID) naming the URL and the reason when it names no store
// or one a server would rewrite ('.', '..', percent-encoding, doubled '/').
void check_store_url(const std::string &url);

// Whether a failure means the store was never reached (no HTTP answer at all) or refused
// our credentials — what, met by a whole run, makes lodge exit 4.
[[nodiscard]] bool is_unreachable(const Error &e);

// The directory of a file:// store URL ("" for any other URL): walks skip it.
[[nodiscard]] std::string file_store_root(const std::string &url);

// The store a ledger serves, canonicalized so that two spellings of one place compare
// equal: s3://b/archive, s3://b/archive/ and s3://b//archive; file://./x and file:///abs/x.
struct Binding {
  std::string scheme;   // "s3", "az" or "file"
  std::string endpoint; // s3: the endpoint URL (scheme and host lowercased, no default
                        // port, no trailing '/'), "aws" for AWS's own; az: the blob
                        // endpoint URL, likewise; file: ""
  std::string location; // s3: the bucket; az: the container; file: the directory's absolute
                        // path, symlinks resolved
  std::string root;     // s3, az: the prefix, no leading, trailing or doubled '/' ("" at
                        // the root); file: ""
  // Whether lodge tags the store's objects pending at upload and committed once ACTIVE
  // (Capabilities::state_tags): Azure always, S3 with tag_state, file:// never. A ledger
  // records it with the binding, so every host tags alike.
  bool state_tags = false;
  bool operator==(const Binding &) const = default;
};

// The binding of the store a URL (and, for S3, an endpoint: "" for AWS) names, with its
// tagging mode (`tag_state`: the S3 configuration key; the other schemes decide for
// themselves). A relative file:// directory is taken from the current directory. Throws
// LodgeError(CONFIG_INVALID) for a URL that names no store.
[[nodiscard]] Binding canonical_binding(const std::string &url, const std::string &endpoint,
                                        bool tag_state = false);

// A binding as people read it: "s3://b/archive at http://127.0.0.1:9000", "file:///srv/x".
[[nodiscard]] std::string describe(const Binding &b);

} // namespace lodge::store
