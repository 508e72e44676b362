// file:// staged uploads: each one a directory under .lodge-mpu/ holding its record
// (upload.json: key, content type, metadata) and its part files, each published whole by
// rename; completing one assembles the parts, checking each against its digest, into one
// object published as a put is.
#include "file_store.hpp"

#include <algorithm>
#include <cstdio>
#include <fcntl.h>
#include <lodge/crypto/random.hpp>
#include <lodge/crypto/sha256.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/log.hpp>
#include <unistd.h>

namespace lodge::store::file {

Result<std::string> FileStore::begin_staged(const StagedRequest &req) {
  const auto &key = req.key;
  const auto &content_type = req.content_type;
  const auto &metadata = req.metadata;
  if (auto v = check_key(key); !v) return v.error();
  std::string id = crypto::random_uuid();
  fs::path dir = m_root / k_mpu_dir / id;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error("CREATE MULTIPART " + key, ec.value());
  nlohmann::json j{{"key", key},
                   {"content_type", content_type},
                   {"metadata", metadata},
                   {"initiated_ms", util::system_clock().now_ms()}};
  if (auto w = write_small(dir / "upload.json", j.dump(), true); !w) return w.error();
  return id;
}

Result<Part> FileStore::put_part(const std::string &key, const std::string &upload_id, int number,
                                 const Body &body, int64_t deadline_steady_ms) {
  auto up = load_upload(key, upload_id);
  if (!up) return up.error();
  char name[32];
  std::snprintf(name, sizeof name, "part-%05d", number);
  fs::path dest = m_root / k_mpu_dir / upload_id / name;
  auto tmp = write_temp(body, deadline_steady_ms, dest, false);
  if (!tmp) return tmp.error();
  if (!tmp.value().commit()) return io_error("PUT PART " + key, tmp.value().error().err);
  return Part{number, body.sha256_hex, body.sha256_hex};
}

Result<PutResult> FileStore::complete_staged(const StagedRequest &req, const std::string &upload_id,
                                             const std::vector<Part> &parts, int64_t deadline_steady_ms) {
  const auto &key = req.key;
  auto up = load_upload(key, upload_id);
  if (!up) return up.error();
  fs::path dir = m_root / k_mpu_dir / upload_id;
  auto made = temp_file(obj(key), true);
  if (!made) return Error(made.error().code, "COMPLETE MULTIPART " + key + ": " + made.error().message);
  util::AtomicFile &tmp = made.value(); // discarded with `made` unless published
  crypto::Sha256 whole;
  for (const auto &p : parts) {
    char name[32];
    std::snprintf(name, sizeof name, "part-%05d", p.number);
    util::Fd in(::open((dir / name).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!in.valid()) {
      if (errno != ENOENT) return io_error("COMPLETE MULTIPART " + key + ": part " + name, errno);
      return Error(Errc::storage_error,
                   "COMPLETE MULTIPART " + key + ": part " + std::to_string(p.number) + " missing");
    }
    // A read error is not the end of the part: it fails the completion.
    crypto::Sha256 part;
    char buf[1 << 16];
    while (true) {
      ssize_t n = ::read(in.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return io_error("COMPLETE MULTIPART " + key + ": reading part " + name, errno);
      if (n == 0) break;
      part.update(buf, static_cast<size_t>(n));
      whole.update(buf, static_cast<size_t>(n));
      if (!tmp.write(std::string_view(buf, static_cast<size_t>(n))))
        return io_error("COMPLETE MULTIPART " + key, tmp.error().err);
    }
    // S3 refuses a part whose ETag is not the stored part's; here a part file changed
    // after it was written (or after resume proved it) is caught by its digest.
    if (auto got = crypto::to_hex(part.finish()); !p.sha256_hex.empty() && got != p.sha256_hex)
      return Error(Errc::content_mismatch, "COMPLETE MULTIPART " + key + ": part " +
                                               std::to_string(p.number) + " (" + (dir / name).string() +
                                               ") hashes to " + got +
                                               ", not the SHA-256 it was stored with (" + p.sha256_hex +
                                               "): it changed after it was written; nothing is published");
  }
  // Made durable by flush(), as a put is.
  if (deadline_steady_ms > 0 && util::steady_ms() >= deadline_steady_ms)
    return Error(Errc::deadline_exceeded, "COMPLETE MULTIPART " + key + ": deadline passed");
  const auto &side = up.value();
  auto content_type = side.text("content_type");
  if (!content_type) return content_type.error();
  auto m = side.metadata("metadata");
  if (!m) return m.error();
  // The object carries its row's digest in its stamp: never bytes that hash otherwise.
  const std::string digest = crypto::to_hex(whole.finish());
  if (auto it = m->find(meta::sha256); it != m->end() && it->second != digest)
    return Error(Errc::content_mismatch, "COMPLETE MULTIPART " + key + ": the parts assembled hash to " +
                                             digest + ", not the SHA-256 the object is stamped with (" +
                                             it->second + "); nothing is published");
  auto r = publish(tmp, key, content_type.value(), m.value(), req.options, digest);
  if (r) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  return r;
}

Status FileStore::abort_staged(const std::string &key, const std::string &upload_id) {
  auto up = load_upload(key, upload_id);
  if (!up) return up.error().code == Errc::not_found ? ok_status() : Status(up.error());
  std::error_code ec;
  fs::remove_all(m_root / k_mpu_dir / upload_id, ec);
  if (ec) return io_error("ABORT MULTIPART " + key, ec.value());
  return ok_status();
}

// The staged directory's part files, each hashed as it is read now: lodge's own store
// vouches for its bytes (a part file is published whole by rename, so a part sent again
// replaces it; one torn by a crash hashes to another digest and is sent again).
Result<std::vector<StoredPart>> FileStore::list_parts(const std::string &key, const std::string &upload_id) {
  auto up = load_upload(key, upload_id);
  if (!up) return up.error(); // NOT_FOUND when the staged directory is gone
  const fs::path dir = m_root / k_mpu_dir / upload_id;
  std::vector<StoredPart> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    constexpr std::string_view k_part = "part-";
    auto number = name.rfind(k_part, 0) == 0 ? util::parse_int(std::string_view(name).substr(k_part.size()))
                                             : std::nullopt;
    if (!number || *number < 1 || *number > k_max_part_number) continue;
    auto hashed = hash_part(it->path(), "LIST PARTS " + key);
    if (!hashed) return hashed.error();
    if (!hashed.value()) continue; // gone meanwhile: checked below
    const auto &[size, sha] = *hashed.value();
    out.push_back(StoredPart{static_cast<int>(*number), size, sha, sha, {}});
  }
  if (ec == std::errc::no_such_file_or_directory || !load_upload(key, upload_id))
    return Error(Errc::not_found, "LIST PARTS " + key + ": multipart upload " + upload_id + " is gone");
  if (ec) return part_unreadable("LIST PARTS " + dir.string(), ec.value());
  std::sort(out.begin(), out.end(),
            [](const StoredPart &a, const StoredPart &b) { return a.number < b.number; });
  return out;
}

Status FileStore::list_staged(const std::string &prefix,
                              const std::function<bool(const StagedUpload &)> &visit) {
  std::vector<StagedUpload> all;
  std::error_code ec;
  fs::path base = m_root / k_mpu_dir;
  fs::directory_iterator it(base, ec), end;
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return ok_status(); // none ever began
    return io_error("LIST UPLOADS " + base.string(), ec.value());
  }
  for (; it != end; it.increment(ec)) {
    if (ec) return io_error("LIST UPLOADS " + base.string(), ec.value());
    std::string id = it->path().filename().string();
    fs::path record = it->path() / "upload.json";
    auto text = read_small(record);
    if (!text) return text.error();
    if (!text.value()) continue; // begun a moment ago, or its abort is under way
    // An unreadable record cannot be matched to any key: say so and leave it alone,
    // so one damaged upload does not stop every key's deletes.
    auto side = Sidecar::parse(*text.value(), record, "LIST UPLOADS");
    auto k = side ? side->text("key") : Result<std::string>(side.error());
    auto initiated = side ? side->integer("initiated_ms") : Result<int64_t>(side.error());
    if (!k || !initiated) {
      util::log::warn("skipping incomplete upload " + id + ": " +
                      (!k ? k.error() : initiated.error()).message);
      continue;
    }
    if (k->compare(0, prefix.size(), prefix) != 0) continue;
    all.push_back({k.value(), id, initiated.value()});
  }
  // A failed increment sets ec and makes `it` the end iterator: the loop ends without
  // passing its check, so look again here.
  if (ec) return io_error("LIST UPLOADS " + base.string(), ec.value());
  std::sort(all.begin(), all.end(), [](const StagedUpload &a, const StagedUpload &b) {
    return a.key != b.key ? a.key < b.key : a.handle < b.handle;
  });
  for (const auto &u : all)
    if (!visit(u)) break;
  return ok_status();
}

Result<Sidecar> FileStore::load_upload(const std::string &key, const std::string &upload_id) {
  if (upload_id.empty() || upload_id.find('/') != std::string::npos ||
      upload_id.find("..") != std::string::npos)
    return Error(Errc::not_found, "no such multipart upload");
  fs::path record = m_root / k_mpu_dir / upload_id / "upload.json";
  auto text = read_small(record);
  if (!text) return text.error();
  if (!text.value())
    return Error(Errc::not_found, "multipart upload " + upload_id + " of " + key + ": no such upload");
  auto side = Sidecar::parse(*text.value(), record, "multipart upload " + upload_id + " of " + key);
  if (!side) return side.error();
  auto k = side->text("key");
  if (!k) return k.error();
  if (k.value() != key)
    return Error(Errc::not_found, "multipart upload " + upload_id + " of " + key + ": no such upload");
  return side;
}

// A part file's size and SHA-256 as read now; nullopt when it is gone.
Result<std::optional<std::pair<uint64_t, std::string>>> FileStore::hash_part(const fs::path &path,
                                                                             const std::string &what) {
  util::Fd in(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!in.valid()) {
    if (errno == ENOENT) return std::optional<std::pair<uint64_t, std::string>>();
    return part_unreadable(what + ": " + path.string(), errno);
  }
  crypto::Sha256 h;
  uint64_t size = 0;
  std::string buf(static_cast<size_t>(1) << 16, '\0');
  while (true) {
    ssize_t n = ::read(in.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return part_unreadable(what + ": reading " + path.string(), errno);
    if (n == 0) break;
    h.update(buf.data(), static_cast<size_t>(n));
    size += static_cast<uint64_t>(n);
  }
  return std::optional(std::make_pair(size, crypto::to_hex(h.finish())));
}

} // namespace lodge::store::file
